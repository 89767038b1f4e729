"""The chief's curves.png, drawn by a process of its own (trainer.curves_process): drawn from
the result as it was handed over; a warning, never a failure, without matplotlib or when
drawing fails; nothing drawn, and no process left, when the run fails. (A real 2-worker
run: tests/local/test_run_outputs.py.)"""

from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path

import pytest

from trainer import curves_process
from trainer.curves_process import CurvesProcess

RESULT = {
    "workers": 2, "global_batch_size": 64, "test_accuracy": 0.9, "test_loss": 0.3,
    "images_per_sec": 100.0, "restarts": 0,
    "history": {"loss": [0.5, 0.4], "accuracy": [0.8, 0.85], "test_loss": [0.4, 0.3],
                "test_accuracy": [0.85, 0.9], "restart": [0, 0]},
}  # fmt: skip


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_the_chief_draws_curves_png_beside_the_result(tmp_path: Path) -> None:
    path = curves_process.write_curves(RESULT, str(tmp_path), "mnist")
    assert path == str(tmp_path / "curves.png") and Path(path).stat().st_size > 10_000


def test_without_matplotlib_one_warning_says_how_to_install_it_and_nothing_is_drawn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with caplog.at_level(logging.WARNING):
        source = io.BytesIO(json.dumps(RESULT).encode())
        assert curves_process.serve(str(tmp_path), "mnist", source) is None
    assert _warnings(caplog) == [
        "no curves.png: matplotlib is not installed (pip install 'tflaunch[plot]')"
    ]
    assert not (tmp_path / "curves.png").exists()


def test_a_result_that_cannot_be_drawn_is_a_warning_not_a_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        assert curves_process.write_curves({"history": {}}, str(tmp_path), "mnist") is None
    (warning,) = _warnings(caplog)
    assert warning.startswith("no curves.png: drawing failed (ValueError: "), warning


def test_the_process_draws_the_result_as_it_was_when_handed_over(tmp_path: Path) -> None:
    drawing = CurvesProcess(str(tmp_path), "mnist", "worker 0/2")
    result = dict(RESULT)
    drawing.start(result)
    result.clear()  # the caller's dict may change afterwards
    assert drawing.wait() == str(tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_without_a_result_the_process_exits_and_draws_nothing(tmp_path: Path) -> None:
    drawing = CurvesProcess(str(tmp_path), "mnist", "worker 0/2")
    assert drawing.wait() is None  # end-of-file: nothing to draw
    assert not (tmp_path / "curves.png").exists()


def test_a_failed_run_abandons_the_process(tmp_path: Path) -> None:
    drawing = CurvesProcess(str(tmp_path), "mnist", "worker 0/2")
    drawing.abandon()
    assert drawing._process is not None and drawing._process.returncode is not None
    assert drawing.wait() is None
    assert not (tmp_path / "curves.png").exists()
