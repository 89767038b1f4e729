"""A checkpoint volume the worker cannot write is a configuration error before the program
starts (exit 78, naming the path and the UID), not an exit 1 that group restarts retry.

The directory is really unwritable: mode 0555, and when the tests run as root (who may
write anywhere) the wrapper runs without CAP_DAC_OVERRIDE (util-linux `setpriv`), as an
NFS export with root squashing or a claim owned by another UID treats the worker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.core import contract
from trainer import preflight
from trainer.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
NO_OVERRIDE = ["--inh-caps=-dac_override,-dac_read_search",
               "--bounding-set=-dac_override,-dac_read_search"]  # fmt: skip


def _as_worker() -> list[str]:
    """The prefix that makes this process subject to file modes (nothing unless root)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: no directory is unwritable")
    return [setpriv, *NO_OVERRIDE, "--"]


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "claim"
    directory.mkdir()
    directory.chmod(0o555)
    yield directory
    directory.chmod(0o755)


def test_an_unwritable_checkpoint_volume_stops_the_worker_with_78_naming_path_and_uid(
    read_only: Path, tmp_path: Path
) -> None:
    checkpoints = read_only / "mnist" / "run-1" / "backup"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "TFLAUNCH_"))}
    env.pop(contract.ENV_WORKER_INDEX, None)
    env["PYTHONPATH"] = str(REPO)

    done = subprocess.run(
        [*_as_worker(), sys.executable, "-m", contract.WRAPPER_MODULE,
         "--checkpoint-dir", str(checkpoints), "--model-dir", str(tmp_path / "model"),
         "--", sys.executable, "-c", "print('the program ran')"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert done.returncode == contract.EXIT_CONFIG_ERROR, done.stderr
    assert f"cannot write the checkpoint directory {checkpoints} as UID {os.geteuid()}" in (
        done.stderr
    ), done.stderr
    assert "fsGroup" in done.stderr
    assert "the program ran" not in done.stdout


def test_a_writable_checkpoint_directory_is_created_and_left_clean(tmp_path: Path) -> None:
    directory = tmp_path / "mnist" / "run-1" / "backup"

    preflight.check_writable(str(directory), "worker 0/2")

    assert directory.is_dir() and not any(directory.iterdir())


def test_the_check_names_the_model_directory_too(read_only: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("in-process as root every directory is writable (see the test above)")
    with pytest.raises(ConfigError, match="model directory"):
        preflight.check_writable(str(read_only / "model"), "worker 0/2", "model directory")


def test_the_write_check_leaves_a_peers_probe_with_the_same_pid_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pod has its own PID namespace, so the trainers of two workers sharing a
    checkpoint volume have the same PID (seen on the real node: both 9): a probe named by the
    PID alone was the peer's too, and the one removing it first made the other's check fail
    with ENOENT (exit 78) at random."""
    monkeypatch.setattr(os, "getpid", lambda: 9)
    peers = tmp_path / ".tflaunch-write-check-9"
    peers.write_text("ok\n")  # the peer's, between its write and its remove

    preflight.check_writable(str(tmp_path), "worker 1/2")

    assert peers.read_text() == "ok\n"
    assert [p.name for p in tmp_path.iterdir()] == [peers.name]  # ours removed
