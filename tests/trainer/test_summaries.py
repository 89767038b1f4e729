"""The chief's pictures are optional: without matplotlib (the `plot` extra) or TensorBoard, or
when drawing fails, it says so in one warning and the run still succeeds. (With them, a real
2-worker run: tests/local/test_run_outputs.py.)"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.core import contract

os.environ.setdefault(contract.ENV_LEGACY_KERAS, "1")  # before trainer.summaries imports Keras

from trainer import summaries

RESULT = {
    "workers": 2, "global_batch_size": 64, "test_accuracy": 0.9, "test_loss": 0.3,
    "images_per_sec": 100.0, "restarts": 0,
    "history": {"loss": [0.5, 0.4], "accuracy": [0.8, 0.85], "test_loss": [0.4, 0.3],
                "test_accuracy": [0.85, 0.9], "restart": [0, 0]},
}  # fmt: skip


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_the_chief_draws_curves_png_beside_the_result(tmp_path: Path) -> None:
    path = summaries.write_curves(RESULT, str(tmp_path), "mnist")
    assert path == str(tmp_path / "curves.png") and Path(path).stat().st_size > 10_000


def test_without_matplotlib_one_warning_says_how_to_install_it_and_nothing_is_drawn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with caplog.at_level(logging.WARNING):
        assert summaries.write_curves(RESULT, str(tmp_path), "mnist") is None
    assert _warnings(caplog) == [
        "no curves.png: matplotlib is not installed (pip install 'tflaunch[plot]')"
    ]
    assert not (tmp_path / "curves.png").exists()


def test_a_result_that_cannot_be_drawn_is_a_warning_not_a_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        assert summaries.write_curves({"history": {}}, str(tmp_path), "mnist") is None
    (warning,) = _warnings(caplog)
    assert warning.startswith("no curves.png: drawing failed (ValueError: "), warning


def test_without_tensorboard_the_chief_says_once_that_it_writes_no_event_files(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "tensorboard" else real(name, *args)

    assert summaries.tensorboard_installed()
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with caplog.at_level(logging.WARNING):
        assert not summaries.tensorboard_installed()
    (warning,) = _warnings(caplog)
    assert "no event files" in warning and "tflaunch[trainer]" in warning, warning


def test_curves_meanwhile_draws_the_result_as_it_was_when_started(tmp_path: Path) -> None:
    drawing = summaries.CurvesMeanwhile(str(tmp_path), "mnist")
    assert drawing.wait() is None  # never started: nothing to wait for
    result = dict(RESULT)
    drawing.start(result)
    result.clear()  # the caller's dict may change while the thread draws
    assert drawing.wait() == str(tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000
