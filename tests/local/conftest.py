"""A finished 2-worker `tflaunch local` run that several modules read: what its console
shows (test_runner.py) and what it leaves on disk (test_run_outputs.py). One run, because
each TensorFlow group costs tens of seconds on a 2-core machine."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from launcher.core import contract

LOCAL_RUN_EPOCHS = 3
LOCAL_RUN_EVAL_BATCH = 128
"""--max-test-examples 128 (after --) at --global-batch-size 64: one evaluation batch of 128;
without the flag, all 256 test images would make it 256 (`trainer.data.eval_batch_size`)."""


@dataclasses.dataclass(frozen=True)
class LocalRun:
    workdir: Path
    stdout: str
    stderr: str


def default_env() -> dict[str, str]:
    """The user's environment without anything that changes what TensorFlow logs."""
    quiet = ("TF_CPP_MIN_LOG_LEVEL", contract.ENV_LOG_LEVEL, "TFLAUNCH_LOCAL_VERBOSE")
    return {key: value for key, value in os.environ.items() if key not in quiet}


@pytest.fixture(scope="session")
def finished_local_run(tmp_path_factory: pytest.TempPathFactory) -> LocalRun:
    """`tflaunch local --workers 2` off a terminal with the user's default log level, job
    directory "pictures"; trainer flags after `--`."""
    from trainer.synthetic import make_mnist_like

    data = tmp_path_factory.mktemp("data") / "mnist.npz"
    np.savez(data, **make_mnist_like(train=2048, test=256, seed=3))
    workdir = tmp_path_factory.mktemp("run") / "pictures"
    run = subprocess.run(
        [sys.executable, "-m", "launcher", "local", "--workers", "2",
         "--epochs", str(LOCAL_RUN_EPOCHS), "--data", str(data), "--workdir", str(workdir),
         "--global-batch-size", "64", "--", "--max-test-examples", "128",
         "--steps-per-execution", "2"],
        capture_output=True, text=True, timeout=300, env=default_env(),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return LocalRun(workdir, run.stdout, run.stderr)
