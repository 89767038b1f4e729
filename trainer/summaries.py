"""What a run leaves to look at: test scores per epoch and TensorBoard event files (the
chief); curves.png is `trainer.curves_process`'s.

* `EpochEvaluation` runs the exact, every-example-once test evaluation (`trainer.evaluate`)
  at each epoch's end, on every worker (each step is a collective), and hands the scores
  to the callbacks after it as `val_loss` / `val_accuracy`, Keras' names for them.
* `TensorBoardWriter` writes, on the chief only, `train/` scalars per step window (loss,
  accuracy, learning rate, images/s) and per epoch, `test/` per epoch and the final
  evaluation. Like the progress lines it reads the metrics from the device only when it
  writes (at most every few seconds and at each epoch's end), never per step.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf
import tf_keras as keras

from trainer import evaluate

log = logging.getLogger(__name__)

DEFAULT_WINDOW_SECONDS = 5.0


class EpochEvaluation(keras.callbacks.Callback):  # type: ignore[misc]
    """Test loss and accuracy at every epoch's end, on every worker (a collective).

    `scores` maps each evaluated epoch (0-based) to its scores; `seconds` is the time spent
    evaluating, which is not training time.
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        dataset: Any,
        steps: int,
        on_step: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__()
        self._supports_tf_logs = True
        self._strategy = strategy
        self._dataset = dataset
        self._steps = steps
        self._on_step = on_step
        self._step: Callable[[Any, Any], tf.Tensor] | None = None
        self.scores: dict[int, evaluate.Scores] = {}
        self.seconds = 0.0

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        started = time.monotonic()
        if self._step is None:  # one traced function for every epoch
            self._step = evaluate.make_step(self._strategy, self.model)
        scores = evaluate.evaluate(
            self._strategy, self.model, self._dataset, self._steps, self._on_step, self._step
        )
        self.seconds += time.monotonic() - started
        self.scores[epoch] = scores
        if logs is not None:
            logs["val_loss"] = scores.loss
            logs["val_accuracy"] = scores.accuracy


def tensorboard_installed() -> bool:
    """True when tf.summary can write scalars (TensorBoard implements them, not TensorFlow).

    An image without it still trains: the chief says once that it writes no event files.
    """
    if importlib.util.find_spec("tensorboard") is not None:
        return True
    log.warning(
        "TensorBoard is not installed, so no event files are written "
        "(pip install tensorboard, or the tflaunch[trainer] extra)"
    )
    return False


class TensorBoardWriter(keras.callbacks.Callback):  # type: ignore[misc]
    """Event files under `logdir/train` and `logdir/test` (add it on the chief only).

    Args:
        logdir: e.g. the checkpoint volume's `<job>/tensorboard`.
        global_batch_size: examples per step over all replicas, for images/s.
        window_seconds: the shortest time between two step-window points within an epoch.
        clock: for tests.
    """

    def __init__(
        self,
        logdir: str,
        global_batch_size: int,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._supports_tf_logs = True  # tensors in batch hooks: read only when writing
        self.logdir = logdir
        self._batch_size = global_batch_size
        self._window_seconds = window_seconds
        self._clock = clock
        self._train = tf.summary.create_file_writer(os.path.join(logdir, "train"))
        self._test = tf.summary.create_file_writer(os.path.join(logdir, "test"))
        self._epoch = 0
        self._window: tuple[int, float] | None = None
        """(global step, time) where the current window began: the end of the first
        execution, so that tracing does not count against images/s."""

    @property
    def _steps(self) -> int:
        return int((self.params or {}).get("steps") or 0)

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        now = self._clock()
        done = self._epoch * self._steps + batch + 1
        if self._window is None:
            self._window = (done, now)
        elif now - self._window[1] >= self._window_seconds:
            self._write_window(done, now, logs or {})

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        values = logs or {}
        done = (epoch + 1) * self._steps
        if self._window is not None and done > self._window[0]:
            self._write_window(done, self._clock(), values)
        with self._train.as_default(step=epoch + 1):
            for name in ("loss", "accuracy"):
                if name in values:
                    tf.summary.scalar(f"epoch_{name}", float(values[name]))
        with self._test.as_default(step=epoch + 1):
            for name in ("loss", "accuracy"):
                if f"val_{name}" in values:
                    tf.summary.scalar(f"epoch_{name}", float(values[f"val_{name}"]))
        self._train.flush()
        self._test.flush()

    def _write_window(self, done: int, now: float, logs: Mapping[str, Any]) -> None:
        assert self._window is not None
        steps, seconds = done - self._window[0], now - self._window[1]
        with self._train.as_default(step=done):
            for name in ("loss", "accuracy"):
                if name in logs:
                    tf.summary.scalar(name, float(logs[name]))  # the host sync, per window
            tf.summary.scalar("learning_rate", self._learning_rate())
            if steps > 0 and seconds > 0:
                tf.summary.scalar("images_per_sec", steps * self._batch_size / seconds)
        self._window = (done, now)

    def _learning_rate(self) -> float:
        rate = self.model.optimizer.learning_rate
        if callable(rate) and not isinstance(rate, tf.Variable):  # a schedule
            rate = rate(self.model.optimizer.iterations)
        return float(keras.backend.get_value(rate))

    def evaluation(self, scores: evaluate.Scores, step: int) -> None:
        """The final test scores, at the last global step; then the files are closed."""
        with self._test.as_default(step=step):
            tf.summary.scalar("evaluation_loss", scores.loss)
            tf.summary.scalar("evaluation_accuracy", scores.accuracy)
        for writer in (self._train, self._test):
            writer.flush()
            writer.close()
