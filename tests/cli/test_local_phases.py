"""`tflaunch local --verbose`'s phases line: result.json's `phases`, in the order they happen."""

from __future__ import annotations

from launcher.cli.local_cmd import phase_line
from launcher.core import contract


def test_the_phases_line_follows_the_order_they_happen_whatever_the_json_order() -> None:
    # The result line is printed with sorted keys: the line must not follow them.
    phases = {name: float(i) for i, name in enumerate(contract.RESULT_PHASES)}
    phases["total"] = 99.0
    line = phase_line(dict(sorted(phases.items())))
    assert line.startswith("import 0.0s, strategy 1.0s, setup 2.0s, first_step 3.0s, fit 4.0s")
    assert line.endswith("fit_end 5.0s, evaluate 6.0s, export 7.0s, total 99.0s")


def test_a_result_from_an_older_trainer_shows_only_what_it_has() -> None:
    assert phase_line({"fit": 2.25, "total": "?", "unknown": 1.0}) == "fit 2.2s"
