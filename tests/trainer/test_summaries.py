"""TensorBoard is optional: without it the chief says so in one warning and the run still
succeeds (curves.png: tests/trainer/test_curves_process.py; with both, a real 2-worker run:
tests/local/test_run_outputs.py)."""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any

import pytest

from launcher.core import contract

os.environ.setdefault(contract.ENV_LEGACY_KERAS, "1")  # before trainer.summaries imports Keras

from trainer import summaries


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


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
