"""`tflaunch local` on a real terminal (a pty): one progress bar redrawn in place, a status
line per worker, nothing wider than the terminal, no colors with NO_COLOR (issue 13 item 2).
The drawing itself is tested without TensorFlow in test_display.py."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pexpect
import pytest

from launcher.core import contract

CONTROL = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
COLUMNS = 100


@pytest.fixture(scope="module")
def mnist_npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import numpy as np

    from trainer.synthetic import make_mnist_like

    path = tmp_path_factory.mktemp("data") / "mnist.npz"
    np.savez(path, **make_mnist_like(train=3072, test=512, seed=1))  # 12 steps of 256
    return path


@pytest.mark.tf
def test_a_terminal_gets_one_live_bar_and_a_line_per_worker(tmp_path, mnist_npz):
    env = {
        k: v
        for k, v in os.environ.items()
        # COLUMNS/LINES would override the pty's size (pytest-xdist workers have them set)
        if k not in ("TF_CPP_MIN_LOG_LEVEL", contract.ENV_LOG_LEVEL, "COLUMNS", "LINES")
    }
    env.update(NO_COLOR="1", TERM="xterm")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "launcher", "local", "--workers", "2", "--epochs", "2", "--data", str(mnist_npz),
         "--workdir", str(tmp_path), "--", "--steps-per-execution", "2"],
        env=env, encoding="utf-8", codec_errors="replace", dimensions=(24, COLUMNS), timeout=240,
    )  # fmt: skip
    child.expect(pexpect.EOF)
    child.close()
    output = child.before
    assert child.exitstatus == 0, output[-3000:]
    assert "\x1b[3A\x1b[J" in output, "the bar and 2 worker lines are redrawn in place"
    assert not re.search(r"\x1b\[[0-9;]*m", output), "NO_COLOR: no colors"
    drawn = [CONTROL.sub("", segment) for segment in output.split("\r\n")]
    bars = [line for line in drawn if line.startswith("mnist  ")]
    workers = [line for line in drawn if line.startswith("  worker ")]
    live = r"epoch 2/2 .*step \d+/12 .*loss \d\.\d{4} .*img/s .*ETA \d+s"
    assert any(re.search(live, bar) for bar in bars), [b for b in bars if "epoch" in b]
    assert "  worker 1  done" in workers and "  worker 0  done" in workers, workers
    assert {"  worker 0  training", "  worker 1  training"} <= set(workers), workers
    assert all(len(line) < COLUMNS for line in bars + workers), "a block line wrapped"
    assert "mnist: epoch 1/2, step 12/12, loss " in output, (
        "each finished epoch stays above the bar"
    )
    assert " INFO " not in output and "TFLAUNCH_PROGRESS" not in output
    assert "succeeded" in output
