"""Two real workers on loopback: synchronous training, resume after a crash, and
survivors that exit (instead of hanging) when a peer dies."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from launcher.core import contract
from trainer import data

from .conftest import SpawnGroup

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


def test_two_workers_train_in_sync_and_the_chief_publishes_the_result(
    spawn_group: SpawnGroup, mnist_npz: Path, tmp_path: Path
) -> None:
    workers = spawn_group(2, args(mnist_npz, tmp_path, "--epochs", "2"))
    for worker in workers:
        assert worker.wait(120) == contract.EXIT_OK, worker.stderr
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
    assert json.loads((tmp_path / "model" / contract.RESULT_FILE).read_text()) == result
    assert (tmp_path / "model" / "saved_model.pb").exists()
    assert other.stdout == ""  # only the chief prints the result line
    for index, worker in enumerate(workers):
        assert f"[worker {index}/2] INFO epoch 2/2: loss=" in worker.stderr


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
    "test_examples",
    # 456 = 7 global batches of 64 + 8: the last 8 fit in worker 0's slice (32 per
    # replica), so worker 1 has no real example in the last step and must still run it.
    [512, 456],
    ids=["divides-by-the-batch", "partial-last-batch"],
)
def test_every_test_example_is_evaluated_exactly_once(
    spawn_group: SpawnGroup, mnist_npz: Path, tmp_path: Path, test_examples: int
) -> None:
    flags = ["--epochs", "1", "--max-train-examples", "1024"]
    flags += ["--max-test-examples", str(test_examples)]
    workers = spawn_group(2, args(mnist_npz, tmp_path, *flags))
    for worker in workers:
        assert worker.wait(120) == contract.EXIT_OK, worker.stderr
    result = workers[0].result()
    assert result["test_examples"] == test_examples
    accuracy, loss = straightforward_scores(tmp_path / "model", mnist_npz, test_examples)
    assert result["test_accuracy"] == pytest.approx(accuracy, abs=1e-9)
    assert result["test_loss"] == pytest.approx(loss, rel=1e-4)


def test_a_restarted_group_resumes_from_the_last_checkpoint(
    spawn_group: SpawnGroup, mnist_npz: Path, tmp_path: Path
) -> None:
    flags = args(mnist_npz, tmp_path, "--epochs", "4", "--checkpoint-dir", str(tmp_path / "ckpt"))
    first = spawn_group(2, flags)
    # Epoch 2 begins only after epoch 1's backup is written: kill the group then.
    first[0].wait_for_log(r"epoch 2/4: loss=", timeout=120)
    for worker in first:
        worker.kill()

    second = spawn_group(2, flags, env={contract.ENV_RESTARTS: "1"})
    for worker in second:
        assert worker.wait(120) == contract.EXIT_OK, worker.stderr
    result = second[0].result()
    assert int(result["resumed_from_epoch"]) >= 1  # type: ignore[call-overload]
    assert result["restarts"] == 1
    history = result["history"]
    assert isinstance(history, dict) and len(history["loss"]) == 4
    assert "resuming from the backup" in second[1].stderr
    assert not (tmp_path / "ckpt" / "chief").exists()  # the backup is gone once done


@pytest.mark.parametrize("victim", [0, 1], ids=["chief-dies", "worker-dies"])
def test_survivors_exit_nonzero_soon_after_a_peer_dies(
    spawn_group: SpawnGroup, mnist_npz: Path, tmp_path: Path, victim: int
) -> None:
    workers = spawn_group(2, args(mnist_npz, tmp_path, "--epochs", "200"))
    survivor = workers[1 - victim]
    survivor.wait_for_log(r"epoch 1/200: loss=", timeout=120)
    workers[victim].kill()
    killed = time.monotonic()
    code = survivor.wait(90)
    took = time.monotonic() - killed
    print(
        f"survivor of a dead {'chief' if victim == 0 else 'worker'} exited {code} after {took:.1f}s"
    )
    assert code == contract.EXIT_TRANSIENT, survivor.stderr
    assert took < 60
    assert "a peer died, froze or restarted" in survivor.stderr
