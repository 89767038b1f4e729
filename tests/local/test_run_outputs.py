"""What a real 2-worker `tflaunch local` run leaves to look at: TensorBoard event files
written by the chief alone (read back with TensorFlow's summary iterator), per-epoch test
scores in result.json, and curves.png beside it; `tflaunch plot` of the same result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from launcher.core import contract, curves
from launcher.core.contract import is_cpp_log_start
from launcher.local.paths import LocalPaths
from tests.pictures import assert_rich_png

from .conftest import LOCAL_RUN_EPOCHS, LocalRun

TRAIN_TAGS = {"loss", "accuracy", "learning_rate", "images_per_sec", "epoch_loss", "epoch_accuracy"}
TEST_TAGS = {"epoch_loss", "epoch_accuracy", "evaluation_loss", "evaluation_accuracy"}


def _scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files under `directory`: tag -> [(step, value)]."""
    os.environ.setdefault(contract.ENV_LEGACY_KERAS, "1")
    import tensorflow as tf

    found: dict[str, list[tuple[int, float]]] = defaultdict(list)
    files = sorted(directory.glob("events.out.tfevents.*"))
    assert len(files) == 1, f"one writer (the chief) expected in {directory}: {files}"
    for event in tf.compat.v1.train.summary_iterator(str(files[0])):
        for value in event.summary.value:
            found[value.tag].append((event.step, float(tf.make_ndarray(value.tensor))))
    return dict(found)


@pytest.fixture(scope="module")
def local_run(finished_local_run: LocalRun) -> Path:
    """The shared finished 2-worker run (tests/local/conftest.py): 3 epochs."""
    assert LOCAL_RUN_EPOCHS == 3  # the assertions below count 3 epochs
    return finished_local_run.workdir


@pytest.mark.tf
def test_the_chief_writes_tensorboard_scalars_that_match_the_result(local_run: Path) -> None:
    paths = LocalPaths(local_run)
    result = json.loads(paths.result_file.read_text())
    history = result["history"]
    train = _scalars(paths.tensorboard_dir / "train")
    test = _scalars(paths.tensorboard_dir / "test")
    assert set(train) == TRAIN_TAGS and set(test) == TEST_TAGS

    # Per epoch (step = epoch), the same numbers as result.json's history.
    assert [s for s, _ in train["epoch_loss"]] == [1, 2, 3]
    assert [v for _, v in train["epoch_loss"]] == pytest.approx(history["loss"])
    assert [v for _, v in test["epoch_accuracy"]] == pytest.approx(history["test_accuracy"])
    # Step windows (step = global step): increasing, the learning rate is the spec's.
    steps = [s for s, _ in train["loss"]]
    assert steps == sorted(steps) and steps[-1] == 3 * result["steps_per_epoch"]
    assert [v for _, v in train["learning_rate"]] == pytest.approx([1e-3] * len(steps))
    assert all(v > 0 for _, v in train["images_per_sec"])
    # The final evaluation, at the last step.
    ((step, accuracy),) = test["evaluation_accuracy"]
    assert step == 3 * result["steps_per_epoch"]
    assert accuracy == pytest.approx(result["test_accuracy"])


@pytest.mark.tf
def test_a_run_on_a_file_of_the_user_is_named_so(finished_local_run: LocalRun) -> None:
    result = json.loads(LocalPaths(finished_local_run.workdir).result_file.read_text())
    assert result["dataset"] == contract.DATASET_FILE
    last = finished_local_run.stdout.strip().splitlines()[-1]
    assert "succeeded on your data file: test_accuracy=" in last
    assert "(128 test images)" in last


@pytest.mark.tf
def test_the_result_has_test_scores_per_epoch_and_curves_png_beside_it(local_run: Path) -> None:
    paths = LocalPaths(local_run)
    result = json.loads(paths.result_file.read_text())
    history = result["history"]
    assert len(history["test_loss"]) == len(history["test_accuracy"]) == 3
    assert history["test_accuracy"][-1] == pytest.approx(result["test_accuracy"])
    assert history["restart"] == [0, 0, 0]
    assert_rich_png(paths.model_dir / "curves.png", curves.size_px(1))


@pytest.mark.tf
def test_tflaunch_plot_draws_runs_side_by_side(local_run: Path, tmp_path: Path) -> None:
    result = LocalPaths(local_run).result_file
    restarted = json.loads(result.read_text())
    restarted["history"]["restart"] = [0, 1, 1]
    restarted["restarts"] = 1
    other = tmp_path / "restarted" / "result.json"
    other.parent.mkdir()
    other.write_text(json.dumps(restarted))
    out = tmp_path / "both.png"
    run = subprocess.run(
        [sys.executable, "-m", "launcher", "plot", str(result), str(other), "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert str(out) in run.stdout
    assert_rich_png(out, curves.size_px(2))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.tf
def test_tflaunch_tensorboard_serves_a_local_runs_scalars(local_run: Path) -> None:
    import signal
    import time
    import urllib.request

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "launcher", "tensorboard", "pictures", "--workdir", str(local_run),
         "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        tags: dict[str, object] = {}
        while time.monotonic() < deadline and server.poll() is None:
            try:
                url = f"http://127.0.0.1:{port}/data/plugin/scalars/tags"
                with urllib.request.urlopen(url, timeout=5) as response:
                    tags = json.loads(response.read())
                if tags:
                    break
            except OSError:
                pass
            time.sleep(1)
        assert set(tags) == {"train", "test"}, tags
        assert {"loss", "images_per_sec", "learning_rate"} <= set(tags["train"])  # type: ignore[arg-type]
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=60)
    assert f"http://127.0.0.1:{port}/" in err
    # TensorFlow's C++ lines (oneDNN, the CUDA stub, "failed call to cuInit") are noise here.
    assert "absl::InitializeLog" not in err and "cuInit" not in err, err
    assert not any(is_cpp_log_start(line) for line in err.splitlines()), err


@pytest.mark.tf
def test_offline_a_real_local_run_trains_on_the_shipped_subset_and_names_it(tmp_path):
    """`tflaunch local` as a newcomer runs it with no network: real processes, real digits
    (a slice of the subset, to stay quick), the data set named in result.json."""
    env = {k: v for k, v in os.environ.items() if k != contract.ENV_DATA}
    env.update(
        KERAS_HOME=str(tmp_path / "keras"),
        **{contract.ENV_MNIST_URL: "http://127.0.0.1:9/mnist.npz"},
    )
    workdir = tmp_path / "run"
    run_ = subprocess.run(
        [sys.executable, "-m", "launcher", "local", "--workers", "2", "--epochs", "1",
         "--global-batch-size", "64", "--workdir", str(workdir), "--",
         "--max-train-examples", "1024", "--max-test-examples", "512"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert run_.returncode == 0, run_.stdout[-3000:] + run_.stderr[-3000:]
    lines = run_.stdout.strip().splitlines()
    assert sum("training on the MNIST subset shipped with tflaunch" in line for line in lines) == 1
    assert "succeeded on the MNIST subset shipped with tflaunch" in lines[-1]
    result = json.loads(LocalPaths(workdir).result_file.read_text())
    assert result["dataset"] == contract.DATASET_MNIST_SUBSET
    assert result["test_examples"] == 512
    assert not (tmp_path / "keras" / "datasets" / "mnist.npz").exists()
