"""Preemption without lost work, on real TensorFlow processes under `tflaunch local`.

SIGTERM to one worker in the middle of an epoch: every worker saves at the same step and
exits 79 (contract.EXIT_PREEMPTED); the group restarts without using a retry (backoffLimit 0
here, so a counted restart would fail the run) and resumes right after the saved step:
the optimizer ends at exactly the number of steps asked for, and every worker ends with the
same weights as an uninterrupted run of the same seed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.core import contract

pytestmark = [pytest.mark.tf, pytest.mark.slow]

EPOCHS, STEPS_PER_EPOCH = 2, 64  # 2048 training examples / global batch 32
SHA = re.compile(r"weights sha256 ([0-9a-f]{64})")


@pytest.fixture(scope="module")
def mnist_npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import numpy as np

    from trainer.synthetic import make_mnist_like

    path = tmp_path_factory.mktemp("data") / "mnist.npz"
    np.savez(path, **make_mnist_like(train=2048, test=256, seed=3))
    return path


def _tflaunch(workdir: Path, data: Path) -> list[str]:
    return [
        sys.executable, "-m", "launcher", "local", "--workers", "2",
        "--epochs", str(EPOCHS),
        "--global-batch-size", "32", "--data", str(data), "--workdir", str(workdir),
        "--set", "spec.backoffLimit=0",
        "--", "--steps-per-execution", "5", "--max-test-examples", "256",
    ]  # fmt: skip


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _digests(workdir: Path) -> list[str]:
    """Each worker's final weights digest (its log's last one)."""
    return [SHA.findall((workdir / "logs" / f"worker-{i}.log").read_text())[-1] for i in range(2)]


@pytest.fixture(scope="module")
def uninterrupted(mnist_npz: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final weights digest of the same job, never interrupted."""
    workdir = tmp_path_factory.mktemp("uninterrupted")
    run = subprocess.run(_tflaunch(workdir, mnist_npz), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    first, second = _digests(workdir)
    assert first == second
    return first


@pytest.mark.parametrize("victim", [1, 0], ids=["sigterm-to-worker-1", "sigterm-to-the-chief"])
def test_sigterm_mid_epoch_saves_everywhere_and_resumes_without_a_retry_or_a_lost_step(
    tmp_path: Path, mnist_npz: Path, uninterrupted: str, victim: int
) -> None:
    console = tmp_path / "console.txt"
    backups = tmp_path / "checkpoints" / "chief"
    with console.open("w") as out:
        launcher = subprocess.Popen(
            _tflaunch(tmp_path, mnist_npz), stdout=out, stderr=subprocess.STDOUT, text=True
        )
    try:
        # The first epoch's backup: the second epoch (64 steps, seconds) is under way.
        deadline = time.monotonic() + 300
        while not (backups.exists() and any(backups.glob("*.index"))):
            assert launcher.poll() is None, console.read_text()[-3000:]
            assert time.monotonic() < deadline, "the first epoch never ended"
            time.sleep(0.05)
        workers = _children(launcher.pid)
        assert len(workers) == 2
        os.kill(workers[victim], signal.SIGTERM)
        launcher.wait(timeout=600)
    finally:
        launcher.kill()
    output = console.read_text()
    assert launcher.returncode == 0, output[-4000:]

    logs = [(tmp_path / "logs" / f"worker-{i}.log").read_text() for i in range(2)]
    saved = [int(m) for log in logs for m in contract.PREEMPTED_SAVED.findall(log)]
    assert len(saved) == 2 and saved[0] == saved[1], logs
    step = saved[0]
    assert STEPS_PER_EPOCH < step < EPOCHS * STEPS_PER_EPOCH, "saved in the second epoch"
    assert step % STEPS_PER_EPOCH, "mid-epoch, not at a boundary"
    assert "SIGTERM received" in logs[victim] and "SIGTERM received" not in logs[1 - victim]
    assert (
        f"tflaunch: preempted, every worker saved at step {step}; resuming at step {step}" in output
    ), output
    assert "not a retry: 0/0 used" in output

    result = json.loads((tmp_path / "model" / contract.RESULT_FILE).read_text())
    assert (result["restarts"], result["preemptions"]) == (0, 1)
    assert result["resumed_from_step"] == step
    assert result["optimizer_steps"] == EPOCHS * STEPS_PER_EPOCH  # not one step more or less
    # Same weights on every worker, and the same as if nothing had happened: the model,
    # the optimizer and the data position were all restored exactly.
    assert _digests(tmp_path) == [uninterrupted, uninterrupted]
    assert result["weights_sha256"] == uninterrupted
