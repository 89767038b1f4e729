"""Programs shaped like TensorFlow's tutorials of today under `tflaunch local`, with real
TensorFlow: a Keras 3 tutorial runs on Keras 3 as under plain `python`, a strategy created
too late is named before anything starts (several workers) or explained when it fails (one),
and Keras 3 under MultiWorkerMirroredStrategy on two workers: fit fails, explained and not
retried; a custom loop trains both workers to the same weights (TF 2.21, Keras 3.15)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TIMEOUT = 300
HASH = re.compile(r"^\[worker (\d)\] weights sha256 ([0-9a-f]{64})$", re.MULTILINE)


def _local(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`tflaunch local ARGS` run from `tmp_path` (the tutorials write to ./)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "TFLAUNCH_"))}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "launcher", "local", "--workdir", str(tmp_path / "run"), *args],
        capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=tmp_path,
    )  # fmt: skip


def _error(run: subprocess.CompletedProcess[str]) -> str:
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("tflaunch: error:")]
    return line


@pytest.mark.tf
def test_the_keras_3_tutorial_on_one_worker_runs_on_keras_3_as_under_plain_python(
    tmp_path: Path,
) -> None:
    run = _local(tmp_path, "--script", str(DATA / "keras3_tutorial.py"), "--workers", "1")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "the program runs on Keras 3 (TF_USE_LEGACY_KERAS=0): it is written for Keras 3" in (
        run.stdout
    )
    assert "[worker 0] tutorial finished" in run.stdout
    assert "Eval accuracy" in run.stdout


@pytest.mark.tf
def test_the_keras_3_tutorial_forced_onto_tf_keras_is_explained_and_not_retried(
    tmp_path: Path,
) -> None:
    run = _local(tmp_path, "--script", str(DATA / "keras3_tutorial.py"), "--workers", "1",
                 "--set", "spec.keras=tf-keras", "--set", "spec.backoffLimit=3")  # fmt: skip
    assert run.returncode == 3, run.stdout[-3000:] + run.stderr[-3000:]
    error = _error(run)
    assert "unsupported operand type(s) for /: 'Dataset' and 'int'" in error
    assert "written for Keras 3 and ran on tf-keras" in error and "spec.keras: keras3" in error
    assert "(configuration error)" in error and "restarting" not in run.stdout


def test_a_strategy_created_after_the_datasets_stops_two_workers_before_they_start(
    tmp_path: Path,
) -> None:
    run = _local(tmp_path, "--script", str(DATA / "mwms_after_datasets.py"), "--workers", "2")
    assert (run.returncode, run.stdout) == (2, "")
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith(
        "tflaunch: error: spec.script: mwms_after_datasets.py:9 "
        "tf.data.Dataset.from_tensor_slices runs TensorFlow before mwms_after_datasets.py:10 "
        "creates MultiWorkerMirroredStrategy"
    ), line


@pytest.mark.tf
def test_a_strategy_created_late_on_one_worker_is_warned_then_explained_not_retried(
    tmp_path: Path,
) -> None:
    run = _local(tmp_path, "--script", str(DATA / "mwms_after_datasets.py"), "--workers", "1",
                 "--set", "spec.backoffLimit=3")  # fmt: skip
    assert run.returncode == 3, run.stdout[-3000:] + run.stderr[-3000:]
    (warning,) = [line for line in run.stderr.splitlines() if "warning" in line]
    assert "mwms_after_datasets.py:9 tf.data.Dataset.from_tensor_slices" in warning
    error = _error(run)
    assert "Collective ops must be configured at program startup" in error
    assert error.count("create the strategy at program start, before any other TensorFlow call")
    assert "restarting" not in run.stdout and "strategy created" not in run.stdout


@pytest.mark.tf
def test_keras_3_fit_on_two_workers_fails_explained_and_is_not_retried(tmp_path: Path) -> None:
    run = _local(tmp_path, "--script", str(DATA / "keras3_mwms.py"), "--set", "spec.keras=keras3",
                 "--set", "spec.backoffLimit=3", "--", "--fit")  # fmt: skip
    assert run.returncode == 3, run.stdout[-3000:] + run.stderr[-3000:]
    assert "[worker 0] keras 3." in run.stdout and "tf.keras is keras.src" in run.stdout
    error = _error(run)
    assert "keras-team/keras#20585" in error and "spec.keras: tf-keras" in error, error
    assert "restarting" not in run.stdout


@pytest.mark.tf
def test_keras_3_custom_loop_on_two_workers_trains_them_to_the_same_weights(
    tmp_path: Path,
) -> None:
    run = _local(tmp_path, "--script", str(DATA / "keras3_mwms.py"), "--set", "spec.keras=keras3")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    hashes = dict(HASH.findall(run.stdout))
    assert set(hashes) == {"0", "1"} and hashes["0"] == hashes["1"], run.stdout[-2000:]
