"""A Keras callback that prints the chief's `TFLAUNCH_PROGRESS {json}` lines.

One line for any Keras `fit` under tflaunch (the built-in trainer uses it, and so can your
own program):

    from trainer.progress import ProgressCallback
    model.fit(dataset, epochs=5, steps_per_epoch=100,
              callbacks=[ProgressCallback(global_batch_size=256)])

`tflaunch local` draws its progress bar from these lines, the operator shows the latest one
in the MultiWorkerJob's status (`kubectl get mwj`: Epoch, ETA), and `tflaunch wait`/`status`
print it. The line format lives in `launcher.core.progress`.

Cheap by design: Keras hands batch hooks the logs as tensors (`_supports_tf_logs`), and with
`steps_per_execution=N` calls them once per N steps; the loss is read from the device (a host
sync) only when a line is printed: after the first execution, then at most every
`every_seconds`, and at each epoch's end. Only the chief prints (the other workers train the
same steps): TF_CONFIG's chief, or worker 0 when the cluster has no chief.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import tf_keras as keras

from launcher.core import contract, progress

DEFAULT_EVERY_SECONDS = 2.0


def is_chief(env: Mapping[str, str] | None = None) -> bool:
    """True for the worker that reports progress, from $TF_CONFIG (no TF_CONFIG: single worker)."""
    raw = (env if env is not None else os.environ).get("TF_CONFIG", "")
    try:
        config = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return False
    task = (config.get("task") or {}) if isinstance(config, dict) else {}
    if not isinstance(task, dict) or not task:
        return True
    if task.get("type") == "chief":
        return True
    first_worker = task.get("type") == "worker" and str(task.get("index")) == "0"
    return first_worker and "chief" not in (config.get("cluster") or {})


def _generation() -> int | None:
    """The group restarts behind this program ($TFLAUNCH_RESTARTS), when it says."""
    raw = os.environ.get(contract.ENV_RESTARTS, "")
    return int(raw) if raw.isdigit() else None


class ProgressCallback(keras.callbacks.Callback):  # type: ignore[misc]
    """Prints `TFLAUNCH_PROGRESS {...}` on the chief during `fit`.

    Args:
        global_batch_size: examples per step summed over all replicas, for images/s
            (omitted from the line when not given).
        every_seconds: the shortest time between two lines within an epoch.
        chief: whether this process prints; default: read from TF_CONFIG.
        stream: where to print (default stdout); `clock` is for tests.
    """

    def __init__(
        self,
        global_batch_size: int | None = None,
        every_seconds: float = DEFAULT_EVERY_SECONDS,
        chief: bool | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._supports_tf_logs = True  # tensors in batch hooks: no per-step host sync
        self._batch_size = global_batch_size
        self._every = every_seconds
        self._chief = is_chief() if chief is None else chief
        self._stream = stream
        self._clock = clock
        self._epoch = 0
        self._first: tuple[int, float] | None = None
        """(global step, time) at the end of the first execution of this fit: the rate is
        measured from there, so TensorFlow's tracing does not count."""
        self._last_print = -float("inf")

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        if not self._chief:
            return
        now = self._clock()
        batch = int(batch)  # numpy's int64 in the epoch a resumed fit starts mid-way
        done = self._epoch * self._steps + batch + 1
        first = self._first is None
        if first:
            self._first = (done, now)
        if 0 < self._steps <= batch + 1:
            return  # the epoch's last step: on_epoch_end prints it, with the epoch's loss
        if first or now - self._last_print >= self._every:
            self._print(batch + 1, (logs or {}).get("loss"), now, done, self._summed_over())

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        if self._chief:
            now = self._clock()
            self._print(self._steps, (logs or {}).get("loss"), now, (epoch + 1) * self._steps)

    def _summed_over(self) -> int:
        """How many replicas' losses a batch hook's loss adds up (1: it is the mean already).

        tf_keras reduces a batch's logs with `distribute_reduction_method` "auto", which is a
        sum over all replicas except on TPUs (each replica's own mean, added); the epoch-end
        logs are the metrics' results, a true mean. Dividing gives what one worker shows.
        """
        model = getattr(self, "model", None)
        strategy = getattr(model, "distribute_strategy", None)
        if strategy is None or "TPU" in type(strategy).__name__:
            return 1
        method = getattr(model, "distribute_reduction_method", "auto")
        return int(strategy.num_replicas_in_sync) if method in ("auto", "sum") else 1

    @property
    def _steps(self) -> int:
        return int((self.params or {}).get("steps") or 0)

    def _print(self, step: int, loss: Any, now: float, done: int, summed_over: int = 1) -> None:
        epochs = int((self.params or {}).get("epochs") or 1)
        rate_steps, rate_seconds = 0, 0.0
        if self._first is not None:
            rate_steps, rate_seconds = done - self._first[0], now - self._first[1]
        images = None
        if self._batch_size and rate_steps > 0 and rate_seconds > 0:
            images = rate_steps * self._batch_size / rate_seconds
        line = progress.format_line(
            progress.Progress(
                epoch=self._epoch + 1,
                epochs=epochs,
                step=step,
                steps=self._steps,
                loss=float(loss) / summed_over if loss is not None else None,  # one host sync
                images_per_sec=images,
                eta_seconds=progress.eta_seconds(
                    done, epochs * self._steps, rate_steps, rate_seconds
                ),
                generation=_generation(),
            )
        )
        print(line, file=self._stream or sys.stdout, flush=True)
        self._last_print = now
