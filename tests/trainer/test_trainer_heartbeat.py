"""--heartbeat-timeout: the coordination service's timeout, set before MWMS configures it."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.core import contract
from trainer import heartbeat
from trainer.config import UsageError, parse_args

from .conftest import SpawnGroup


def test_the_default_keeps_tensorflows_timeout_and_a_negative_one_is_refused() -> None:
    assert parse_args([], env={}).heartbeat_timeout == 0.0
    assert parse_args(["--heartbeat-timeout", "4"], env={}).heartbeat_timeout == 4.0
    with pytest.raises(UsageError, match="argument --heartbeat-timeout"):
        parse_args(["--heartbeat-timeout", "-1"], env={})


def test_a_single_worker_or_no_timeout_configures_nothing() -> None:
    # Would raise without a TensorFlow context to configure if it tried; it must not try.
    heartbeat.configure(1, 4.0)
    heartbeat.configure(2, 0.0)


@pytest.mark.tf
def test_with_a_short_timeout_the_survivor_of_a_dead_worker_still_exits_transient(
    spawn_group: SpawnGroup, mnist_npz: Path, tmp_path: Path
) -> None:
    """MWMS accepts the service configured beforehand (training runs), and a dead peer is
    still reported and ends the survivor with exit 1 (how soon: bench/bench_recovery.py)."""
    workers = spawn_group(
        2,
        ["--data", str(mnist_npz), "--global-batch-size", "64", "--epochs", "200",
         "--model-dir", str(tmp_path / "model"), "--stall-timeout", "120",
         "--heartbeat-timeout", "3"],
    )  # fmt: skip
    survivor = workers[0]
    survivor.wait_for_log(r"epoch 1/200: loss=", timeout=600)
    assert "coordination service heartbeat timeout: 3.0s" in survivor.stderr
    workers[1].kill()
    assert survivor.wait(120) == contract.EXIT_TRANSIENT, survivor.stderr
    assert "a peer died, froze or restarted" in survivor.stderr
