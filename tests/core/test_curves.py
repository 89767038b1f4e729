"""The picture of a run (launcher.core.curves) and `tflaunch plot`: result.json in, a PNG of
the expected size with real content out; bad input is one line and exit 2. (A real run's
curves.png: tests/local/test_run_outputs.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.cli.main import run
from launcher.cli.plot_cmd import run_label
from launcher.core import curves
from tests.pictures import assert_rich_png


def _result(epochs: int = 4, restart_at: int | None = None, **extra: Any) -> dict[str, Any]:
    loss = [1.0 / (e + 1) for e in range(epochs)]
    restart = [0 if restart_at is None or e + 1 < restart_at else 1 for e in range(epochs)]
    return {
        "workers": 2,
        "global_batch_size": 64,
        "test_accuracy": 0.97,
        "test_loss": 0.1,
        "images_per_sec": 512.0,
        "restarts": 0 if restart_at is None else 1,
        "history": {
            "loss": loss,
            "accuracy": [1 - v / 2 for v in loss],
            "test_loss": [v * 1.1 for v in loss],
            "test_accuracy": [1 - v / 1.8 for v in loss],
            "restart": restart,
        },
        **extra,
    }


def _write(path: Path, result: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return path


def test_restarts_are_marked_at_the_first_epoch_each_restart_ran():
    run_curves = curves.curves_of(_result(epochs=5, restart_at=3), "r")
    assert run_curves.restarts == ((3, 1),)
    assert "1 restart(s)" in run_curves.caption
    assert curves.curves_of(_result(), "r").restarts == ()


def test_an_older_result_without_test_lists_shows_its_final_score_at_the_last_epoch():
    old = {"test_accuracy": 0.9, "test_loss": 0.3,
           "history": {"loss": [0.5, 0.4], "accuracy": [0.8, 0.85]}}  # fmt: skip
    run_curves = curves.curves_of(old, "old")
    assert run_curves.test_accuracy == (None, 0.9)
    assert run_curves.test_loss == (None, 0.3)
    assert run_curves.restarts == ()


def test_epochs_that_were_not_evaluated_are_gaps_not_zeros():
    result = _result(epochs=3)
    result["history"]["test_loss"] = [None, 0.5, 0.4]
    assert curves.curves_of(result, "r").test_loss == (None, 0.5, 0.4)


def test_draw_writes_a_png_of_one_column_per_run(tmp_path):
    runs = [curves.curves_of(_result(), "a"), curves.curves_of(_result(restart_at=2), "b")]
    path = curves.draw(runs, tmp_path / "out" / "two.png", title="a vs b")
    assert_rich_png(path, curves.size_px(2))
    assert curves.size_px(2) == (2 * curves.COLUMN_WIDTH_PX, curves.HEIGHT_PX)


def test_tflaunch_plot_draws_several_results(tmp_path, capsys):
    one = _write(tmp_path / "one" / "model" / "result.json", _result())
    two = _write(tmp_path / "two" / "model" / "result.json", _result(restart_at=3))
    three = _write(tmp_path / "three.json", _result(epochs=2))
    out = tmp_path / "plot.png"
    assert run(["plot", str(one), str(two), str(three), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"{out} (1680x720, 3 run(s))"
    assert_rich_png(out, curves.size_px(3))


def test_a_runs_label_is_its_job_directory():
    assert run_label(Path("tflaunch-runs/mnist/model/result.json")) == "mnist"
    assert run_label(Path("/x/best/result.json")) == "best"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "is not a result.json"),
        ('{"history": {}}', "has no per-epoch history"),
        ("\x89PNG\r\n\x1a\n\x00\xbd", "is not a result.json (not text)"),  # curves.png
    ],
)
def test_a_file_that_is_not_a_result_is_one_line_naming_it(tmp_path, capsys, content, message):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content.encode("latin-1"))
    assert run(["plot", str(bad), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and message in err, err
    assert not (tmp_path / "x.png").exists()


def test_a_missing_file_or_a_label_count_mismatch_is_a_usage_error(tmp_path, capsys):
    assert run(["plot", str(tmp_path / "nope.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    good = _write(tmp_path / "r.json", _result())
    assert run(["plot", str(good), "--label", "a", "--label", "b"]) == 2
    assert "--label" in capsys.readouterr().err


def test_without_matplotlib_plot_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    good = _write(tmp_path / "r.json", _result())
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert run(["plot", str(good), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'tflaunch[plot]'" in err, err


def test_the_launcher_imports_no_matplotlib_until_plot_runs():
    import subprocess

    code = (
        "import sys, launcher.cli.main; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
