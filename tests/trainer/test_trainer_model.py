"""Model, resume point and watchdog, in-process (single worker, real TensorFlow).

Keras 3's fit fails under MultiWorkerMirroredStrategy (keras-team/keras#20585): these
tests fail if the trainer ever builds a Keras 3 model or lets TensorFlow pick Keras 3.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from launcher.core import contract
from trainer import model as model_lib
from trainer import train
from trainer.watchdog import Watchdog


def test_the_model_is_a_tf_keras_model_and_tf_keras_is_tf_dot_keras() -> None:
    import tensorflow as tf
    import tf_keras

    model = model_lib.build_model()
    assert isinstance(model, tf_keras.Model)
    assert type(model).__module__.startswith("tf_keras.")
    assert tf.keras.Model is tf_keras.Model
    assert os.environ[contract.ENV_LEGACY_KERAS] == "1"
    model_lib.require_tf_keras()


def test_the_model_is_the_textbook_mnist_cnn_with_logits() -> None:
    model = model_lib.build_model()
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds == ["Conv2D", "MaxPooling2D", "Flatten", "Dense", "Dense"]
    assert model.output_shape == (None, 10)
    assert model.layers[-1].get_config()["activation"] == "linear"
    assert model.layers[0].filters == 32 and model.layers[3].units == 128


def test_model_and_optimizer_variables_live_under_the_strategy() -> None:
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    model = train.build_compiled_model(strategy, _config(tmp="unused"))
    assert all(strategy.extended.variable_created_in_scope(v) for v in model.variables)
    # The optimizer captures the strategy it was created under; a wrong one means its
    # slot variables would not be mirrored.
    assert model.optimizer._distribution_strategy is strategy


@pytest.mark.parametrize("count", [32, 37, 16 * 33 + 5])
def test_evaluate_scores_every_test_example_once_like_a_plain_computation(count: int) -> None:
    import tensorflow as tf

    from trainer import data, evaluate
    from trainer.synthetic import make_mnist_like

    mnist = data.Mnist(*make_mnist_like(train=16, test=count, seed=3).values())
    model = model_lib.build_model()
    dataset = data.eval_dataset(mnist, global_batch=16)
    beats: list[None] = []
    scores = evaluate.evaluate(
        tf.distribute.get_strategy(),
        model,
        dataset,
        data.eval_steps(count, 16),
        lambda: beats.append(None),
    )
    logits = model(data.scale(mnist.x_test)).numpy()
    losses = model_lib.per_example_loss(mnist.y_test.astype(np.int64), logits).numpy()
    steps = data.eval_steps(count, 16)
    assert scores.examples == count and len(beats) == -(-steps // evaluate.STEPS_PER_CALL)
    assert scores.accuracy == pytest.approx(np.mean(logits.argmax(axis=1) == mnist.y_test))
    assert scores.loss == pytest.approx(float(np.mean(losses)), rel=1e-5)


def test_a_dead_peer_is_reported_without_tensorflows_graph_node_prefix() -> None:
    import tensorflow as tf

    message = (
        "{{function_node __wrapped__CollectiveReduceV2_Nordering_token_1_device_/job:worker/"
        "replica:0/task:0/device:CPU:0}} Collective ops is aborted by: Socket closed\n"
        "Additional GRPC error information: ..."
    )
    error = train._transient("training", tf.errors.UnavailableError(None, None, message))
    assert "(UnavailableError: Collective ops is aborted by: Socket closed);" in str(error)
    assert "function_node" not in str(error)


def test_a_dead_peer_report_names_the_unhealthy_tasks() -> None:
    import tensorflow as tf

    message = (
        "Collective ops is aborted by: The following tasks are unhealthy (stopped sending "
        "heartbeats):\n/job:worker/replica:0/task:1\nThe tasks have crashed."
    )
    error = train._transient("training", tf.errors.UnavailableError(None, None, message))
    assert "(stopped sending heartbeats): /job:worker/replica:0/task:1)" in str(error)


def test_weights_digest_changes_with_any_weight() -> None:
    model = model_lib.build_model()
    before = model_lib.weights_digest(model)
    weights = model.get_weights()
    weights[-1] = weights[-1] + np.float32(1e-6)
    model.set_weights(weights)
    assert model_lib.weights_digest(model) != before


def test_a_fresh_checkpoint_dir_resumes_from_epoch_zero(tmp_path: Path) -> None:
    assert train.resume_point(str(tmp_path), 10) == train.ResumePoint(0, 0)


class _Flag:
    """Stands in for preemption.SigtermFlag: set from a callback instead of a signal."""

    def __init__(self) -> None:
        self.set = False

    def is_set(self) -> bool:
        return self.set


def _fit(
    tmp_path: Path, save_freq: str | int, callbacks: list[object], spe: int = 1
) -> tuple[object, object]:
    """A fresh model trained for 3 epochs of 5 steps, backed up into tmp_path."""
    import tensorflow as tf

    from trainer import preemption

    model = model_lib.build_model()
    model_lib.compile_model(model, 1e-3, steps_per_execution=spe)
    x = np.zeros((20, 28, 28, 1), np.float32)
    dataset = tf.data.Dataset.from_tensor_slices((x, np.zeros(20, np.int64))).batch(4)
    flag = _Flag()
    backup = preemption.PreemptionBackup(str(tmp_path), save_freq, flag, 5)  # type: ignore[arg-type]
    callbacks = [backup, *callbacks]
    for callback in callbacks:
        if hasattr(callback, "flag"):
            callback.flag = flag  # type: ignore[attr-defined]
    model.fit(dataset.repeat(), epochs=3, steps_per_epoch=5, verbose=0, callbacks=callbacks)
    return model, flag


@pytest.mark.parametrize(
    ("save_freq", "expected"),
    [
        # the last epoch-end backup is epoch 0, so training continues with epoch 1
        ("epoch", train.ResumePoint(1, 0)),
        # backups after global steps 3, 6, 9; step 9 is epoch 1's batch 3 -> batch 4 next
        (3, train.ResumePoint(1, 4)),
    ],
)
def test_resume_point_is_read_from_the_backup_and_restore_checkpoint(
    tmp_path: Path, save_freq: str | int, expected: train.ResumePoint
) -> None:
    """Train epochs of 5 steps and "crash" after global step 9 (epoch 1, batch 3)."""
    import tf_keras

    class Crash(tf_keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            if self.model.optimizer.iterations.numpy() == 9:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _fit(tmp_path, save_freq, [Crash()])
    assert train.resume_point(str(tmp_path), 5) == expected


@pytest.mark.parametrize("spe", [1, 2], ids=["step-by-step", "steps_per_execution=2"])
def test_sigterm_saves_at_the_next_step_and_the_next_fit_resumes_right_after_it(
    tmp_path: Path, spe: int
) -> None:
    """SIGTERM noticed after global step 7 (epoch 1, batch 1): saved after the step the
    handler agrees on (single worker: the next execution), and nothing is trained twice."""
    import tf_keras

    from trainer import preemption

    class Sigterm(tf_keras.callbacks.Callback):  # type: ignore[misc]
        flag: _Flag | None = None

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            if self.model.optimizer.iterations.numpy() >= 6 and self.flag and not self.flag.set:
                self.flag.set = True
                time.sleep(1.5)  # the handler polls the flag once a second

    with pytest.raises(preemption.Preempted) as caught:
        _fit(tmp_path, "epoch", [Sigterm()], spe)
    assert caught.value.exit_code == contract.EXIT_PREEMPTED
    match = contract.PREEMPTED_SAVED.search(str(caught.value))
    assert match, str(caught.value)
    saved = int(match.group("step"))
    assert 6 < saved < 15, "saved mid-epoch, after the signal, before the end"
    resume = train.resume_point(str(tmp_path), 5)
    assert resume.epoch * 5 + resume.step == saved

    # The restarted run: every step it trains is one not trained before the save.
    model, _ = _fit(tmp_path, "epoch", [], spe)
    assert model.optimizer.iterations.numpy() == 15  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("save_freq", "steps_per_execution", "expected"),
    [("epoch", 32, "epoch"), (100, 1, 100), (100, 32, 4), (8, 32, 1)],
)
def test_backup_frequency_in_steps_becomes_executions(
    save_freq: str | int, steps_per_execution: int, expected: str | int
) -> None:
    assert train.backup_frequency(save_freq, steps_per_execution) == expected


def test_watchdog_exits_when_no_progress_for_the_timeout() -> None:
    exits: list[int] = []
    watchdog = Watchdog(exit_fn=exits.append, poll_seconds=0.05)
    watchdog.arm("training", 0.3)
    for _ in range(6):
        time.sleep(0.1)
        watchdog.beat()
    assert exits == []
    time.sleep(0.6)
    assert exits == [contract.EXIT_TRANSIENT]
    watchdog.stop()


def test_a_disarmed_watchdog_never_fires() -> None:
    exits: list[int] = []
    watchdog = Watchdog(exit_fn=exits.append, poll_seconds=0.05)
    watchdog.arm("training", 0.1)
    watchdog.disarm()
    time.sleep(0.3)
    watchdog.stop()
    assert exits == []


def _config(tmp: str) -> train.TrainConfig:
    from trainer.config import parse_args

    return parse_args(["--checkpoint-dir", tmp], env={})


# The end of `fit` must not wait for the preemption handler's SIGTERM-polling thread: it
# sleeps 1 s between polls, and TensorFlow's own stop joins it, which made every worker's
# `fit` end 0.7-1.0 s late (issue 26; `phases.fit_end` in result.json). The thread is held
# in its "sleep" by a gate the test owns, so the check does not depend on timing.


@pytest.mark.tf
def test_stopping_the_handler_does_not_wait_out_the_polling_threads_sleep(
    tmp_path: Path,
) -> None:
    from tensorflow.python.distribute.failure_handling import failure_handling

    from trainer import preemption

    handler = failure_handling.PreemptionCheckpointHandler.__new__(
        failure_handling.PreemptionCheckpointHandler
    )  # only what stopping touches: a real handler needs a cluster
    should_stop, gate = threading.Event(), threading.Event()

    def poll() -> None:  # TensorFlow's loop: sleep, then check the stop flag
        while True:
            gate.wait(60)
            if should_stop.is_set():
                return

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    handler._poll_termination_signal_thread = poller
    handler._poll_termination_signal_thread_should_stop = should_stop
    handler._cluster_wise_termination_watcher_thread = None

    backup = preemption.PreemptionBackup(str(tmp_path), "epoch", preemption.SigtermFlag(), 5)
    backup._handler = handler
    stopped = threading.Event()
    stopper = threading.Thread(target=lambda: (backup._stop_handler(), stopped.set()))
    try:
        stopper.start()
        assert stopped.wait(30), "stopping the handler waited for the polling thread's sleep"
        assert should_stop.is_set() and poller.is_alive()
        assert backup._handler is None
    finally:
        gate.set()  # the sleep ends: the thread sees the flag and returns
        poller.join(30)
        stopper.join(30)
    assert not poller.is_alive()


@pytest.mark.tf
def test_fits_training_iterator_outlives_fit(tmp_path: Path) -> None:
    """Freeing it when fit returns blocked a worker for 4-10 s now and then (issue 26)."""
    import tensorflow as tf

    kept = len(train.KEPT_ALIVE)
    _fit(tmp_path, "epoch", [train.KeepTrainingIterator()])
    assert len(train.KEPT_ALIVE) == kept + 1
    iterator, handler = train.KEPT_ALIVE[-1]
    assert isinstance(iterator, tf.data.Iterator), iterator
    assert handler is not None
