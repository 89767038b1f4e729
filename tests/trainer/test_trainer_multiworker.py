"""Two real workers on loopback: synchronous training, resume after a crash, and
survivors that exit (instead of hanging) when a peer dies."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pytest

from launcher.core import contract
from trainer import data

from .conftest import SpawnGroup, Worker

pytestmark = pytest.mark.tf

RESULT_KEYS = {
    "test_accuracy",
    "test_loss",
    "epochs",
    "workers",
    "replicas",
    "global_batch_size",
    "images_per_sec",
    "fit_seconds",
    "restarts",
    "resumed_from_epoch",
    "history",
    "test_examples",
    "dataset",
}


def args(data: Path, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "--data",
        str(data),
        "--global-batch-size",
        "64",
        "--model-dir",
        str(tmp_path / "model"),
        "--stall-timeout",
        "60",
        *extra,
    ]


@dataclasses.dataclass
class Run:
    """A finished group that several tests read (each TensorFlow group costs seconds)."""

    workers: list[Worker]
    model_dir: Path
    test_examples: int


@pytest.fixture(scope="module")
def synced_run(
    spawn_group_for_module: SpawnGroup, mnist_npz: Path, tmp_path_factory: pytest.TempPathFactory
) -> Run:
    """Two workers train 2 epochs on all 2048 / 512 images (512 test examples: 8 global
    batches of 64)."""
    tmp_path = tmp_path_factory.mktemp("synced")
    workers = spawn_group_for_module(2, args(mnist_npz, tmp_path, "--epochs", "2"))
    for worker in workers:
        assert worker.wait(600) == contract.EXIT_OK, worker.stderr
    return Run(workers, tmp_path / "model", 512)


def test_two_workers_train_in_sync_and_the_chief_publishes_the_result(synced_run: Run) -> None:
    workers, model_dir = synced_run.workers, synced_run.model_dir
    chief, other = workers
    # Gradients were all-reduced: both workers end with bit-identical weights.
    assert chief.weights_sha256() == other.weights_sha256()
    result = chief.result()
    assert set(result) >= RESULT_KEYS
    assert (result["workers"], result["replicas"], result["resumed_from_epoch"]) == (2, 2, 0)
    history = result["history"]
    assert isinstance(history, dict) and len(history["loss"]) == 2
    assert history["loss"][1] < history["loss"][0]
    assert float(result["test_accuracy"]) > 0.5  # type: ignore[arg-type]
    assert json.loads((model_dir / contract.RESULT_FILE).read_text()) == result
    assert (model_dir / "saved_model.pb").exists()
    assert other.stdout == ""  # only the chief prints the result line
    for index, worker in enumerate(workers):
        assert f"[worker {index}/2] INFO epoch 2/2: loss=" in worker.stderr


def test_the_result_says_where_the_time_went(synced_run: Run) -> None:
    """result.json's `phases` (trainer/phases.py): every phase measured by the trainer, the
    disjoint ones adding up to no more than the trainer's `total`, which is no more than the
    process lived. No bound on any phase: speed is bench/'s (bench/compare.py
    counts fit_end stalls)."""
    chief = synced_run.workers[0]
    lived = time.monotonic() - chief.started  # the process has exited by now
    phases = chief.result()["phases"]
    assert isinstance(phases, dict)
    assert set(phases) == {*contract.RESULT_PHASES, "total"}
    assert all(isinstance(s, float) and s >= 0 for s in phases.values()), phases
    assert phases["first_step"] > 0 and phases["fit"] > 0 and phases["export"] > 0, phases
    measured = sum(phases[name] for name in contract.RESULT_PHASES)
    assert measured <= phases["total"] + 0.01 <= lived + 0.01, (phases, lived)
    # fit_seconds (fit's wall time less its evaluations) is the three parts of fit.
    fit_parts = phases["first_step"] + phases["fit"] + phases["fit_end"]
    assert fit_parts == pytest.approx(chief.result()["fit_seconds"], abs=0.01)
    assert "INFO phases: import " in chief.stderr


def straightforward_scores(model_dir: Path, mnist_npz: Path, count: int) -> tuple[float, float]:
    """Accuracy and mean loss of the exported model on the first `count` test images,
    computed in one plain (undistributed) pass."""
    import tensorflow as tf
    import tf_keras

    mnist = data.read_npz(str(mnist_npz)).limited(None, count)
    model = tf_keras.models.load_model(str(model_dir))
    logits = model.predict(data.scale(mnist.x_test), batch_size=count, verbose=0)
    accuracy = float(np.mean(np.argmax(logits, axis=1) == mnist.y_test))
    losses = tf.keras.losses.sparse_categorical_crossentropy(mnist.y_test, logits, from_logits=True)
    return accuracy, float(np.mean(losses))


@pytest.mark.parametrize(
    "run",
    # synced_run: 512 test examples = 8 global batches of 64. restarted_run: 456 = 7 global
    # batches + 8: the last 8 fit in worker 0's slice (32 per replica), so worker 1 has no
    # real example in the last step and must still run it.
    ["synced_run", "restarted_run"],
    ids=["divides-by-the-batch", "partial-last-batch"],
)
def test_every_test_example_is_evaluated_exactly_once(
    request: pytest.FixtureRequest, mnist_npz: Path, run: str
) -> None:
    finished: Run = request.getfixturevalue(run)
    result = finished.workers[0].result()
    assert result["test_examples"] == finished.test_examples
    accuracy, loss = straightforward_scores(finished.model_dir, mnist_npz, finished.test_examples)
    assert result["test_accuracy"] == pytest.approx(accuracy, abs=1e-9)
    assert result["test_loss"] == pytest.approx(loss, rel=1e-4)


@dataclasses.dataclass
class Survivor:
    """What the surviving worker did after its peer was SIGKILLed mid-training."""

    code: int
    seconds: float
    stderr: str


def kill_and_watch(workers: list[Worker], victim: int, epoch_done: str) -> Survivor:
    """SIGKILL `workers[victim]` once the other one logged `epoch_done`; wait for the
    survivor to exit on its own."""
    survivor = workers[1 - victim]
    survivor.wait_for_log(epoch_done, timeout=600)
    workers[victim].kill()
    killed = time.monotonic()
    code = survivor.wait(280)
    return Survivor(code, time.monotonic() - killed, survivor.stderr)


@dataclasses.dataclass
class Restarted:
    survivor_of_the_chief: Survivor
    run: Run
    checkpoint_dir: Path


@pytest.fixture(scope="module")
def chief_killed_then_restarted(
    spawn_group_for_module: SpawnGroup, mnist_npz: Path, tmp_path_factory: pytest.TempPathFactory
) -> Restarted:
    """A group whose chief is SIGKILLed after epoch 2 (epoch 1's backup is written by
    then), and the restarted group that finishes the 4 epochs, as the Job does."""
    tmp_path = tmp_path_factory.mktemp("restarted")
    test_examples = 456
    flags = args(mnist_npz, tmp_path, "--epochs", "4", "--checkpoint-dir", str(tmp_path / "ckpt"))
    flags += ["--max-test-examples", str(test_examples)]
    survivor = kill_and_watch(spawn_group_for_module(2, flags), 0, r"epoch 2/4: loss=")

    second = spawn_group_for_module(2, flags, env={contract.ENV_RESTARTS: "1"})
    for worker in second:
        assert worker.wait(600) == contract.EXIT_OK, worker.stderr
    return Restarted(survivor, Run(second, tmp_path / "model", test_examples), tmp_path / "ckpt")


@pytest.fixture(scope="module")
def restarted_run(chief_killed_then_restarted: Restarted) -> Run:
    return chief_killed_then_restarted.run


def test_a_restarted_group_resumes_from_the_last_checkpoint(
    chief_killed_then_restarted: Restarted,
) -> None:
    second = chief_killed_then_restarted.run.workers
    result = second[0].result()
    assert int(result["resumed_from_epoch"]) >= 1  # type: ignore[call-overload]
    assert result["restarts"] == 1
    history = result["history"]
    assert isinstance(history, dict) and len(history["loss"]) == 4
    assert "resuming from the backup" in second[1].stderr
    # The backup is gone once done.
    assert not (chief_killed_then_restarted.checkpoint_dir / "chief").exists()


@pytest.mark.parametrize("victim", [0, 1], ids=["chief-dies", "worker-dies"])
def test_survivors_exit_nonzero_soon_after_a_peer_dies(
    request: pytest.FixtureRequest, mnist_npz: Path, tmp_path: Path, victim: int
) -> None:
    if victim == 0:  # the first half of the restart test's run
        survivor = request.getfixturevalue("chief_killed_then_restarted").survivor_of_the_chief
    else:
        spawn_group: SpawnGroup = request.getfixturevalue("spawn_group")
        workers = spawn_group(2, args(mnist_npz, tmp_path, "--epochs", "200"))
        survivor = kill_and_watch(workers, victim, r"epoch 1/200: loss=")
    print(
        f"survivor of a dead {'chief' if victim == 0 else 'worker'} exited {survivor.code} "
        f"after {survivor.seconds:.1f}s"
    )
    assert survivor.code == contract.EXIT_TRANSIENT, survivor.stderr
    # Well before the stall watchdog's 300 s: the lost peer's heartbeats ended it (TensorFlow's
    # 10 s; more on a machine as loaded as CI's), not a wait for a timeout.
    assert survivor.seconds < 240
    assert "a peer died, froze or restarted" in survivor.stderr
