"""Save before preemption: SIGTERM to any worker -> every worker saves at the same step.

Kubernetes stops a pod (eviction, drain, spot reclaim, priority preemption) with SIGTERM and,
a grace period later, SIGKILL. TensorFlow's coordination service installs a C++ SIGTERM
handler as soon as MultiWorkerMirroredStrategy starts, and nothing acts on what it records:
without this module a worker ignores SIGTERM and trains on until SIGKILL.

`PreemptionBackup` is tf-keras' `BackupAndRestore` wired to a
`tf.distribute.experimental.PreemptionCheckpointHandler` the way tf-keras itself does for
`save_before_preemption=True`, which tf-keras 2.21 enables only on GCP
(`support_on_demand_checkpoint_callback`: a GCE metadata-server probe), i.e. never on
another cluster. The handler agrees on a step through the coordination service: the worker
that got SIGTERM names the next step, every worker saves right after it and
`Preempted` ends the process with contract.EXIT_PREEMPTED. A restarted group resumes at
the step after the save (the checkpoint holds model, optimizer, epoch and step).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import tensorflow as tf
import tf_keras as keras
from tensorflow.python.distribute.failure_handling import failure_handling_util
from tensorflow.python.eager import context

from launcher.core import contract
from trainer.errors import TrainerError

log = logging.getLogger(__name__)


class Preempted(TrainerError):
    """Told to stop, and every worker saved at the same step: restart and resume there."""

    exit_code = contract.EXIT_PREEMPTED


class _HideDeprecation(logging.Filter):
    """The handler warns about its own use of its deprecated `total_run_calls` at every save."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "total_run_calls" not in record.getMessage()


NOTICE_KEY = "TF_DEFAULT_PREEMPTION_NOTICE_KEY"
"""The coordination service's key where TensorFlow's own SIGTERM handler records the task it
caught a SIGTERM for (`/job:worker/task:1`)."""
NOTICE_SETTLE_SECONDS = 10.0
"""How long after `install` the notice of a SIGTERM that TensorFlow's handler caught may
still appear: its notifier thread polls once a second, then writes the key, and a worker
starved of CPU runs it late (more than 3 s was seen with two test suites on two cores)."""


class SigtermFlag:
    """Records SIGTERM instead of dying of it; the preemption handler polls `is_set`.

    Must be installed after the strategy started: TensorFlow's coordination service replaces
    whatever SIGTERM handler it finds with its own (see the module docstring). A SIGTERM that
    arrived in between went to TensorFlow's handler; it left a notice naming this task in the
    coordination service (NOTICE_KEY), which a thread started by `install` waits for until
    it has had time to appear, so that signal is not lost either.

    Args:
        own_task: this worker's task name in that notice (None: a single worker without a
            coordination service).
        steps_per_execution: how many steps each execution runs (the save waits for one).
    """

    def __init__(self, own_task: str | None = None, steps_per_execution: int = 1) -> None:
        self._event = threading.Event()
        self._own_task = own_task
        self._when = when_saved(steps_per_execution)

    def install(self) -> None:
        logging.getLogger("tensorflow").addFilter(_HideDeprecation())
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle)
        if self._own_task is not None:
            # One blocking lookup off the training thread (it releases the GIL): a lookup per
            # step would need a deadline short enough not to slow the step, which a loaded
            # machine's RPC misses, and then the notice is never seen.
            threading.Thread(target=self._read_notice, name="sigterm-notice", daemon=True).start()

    def _read_notice(self) -> None:
        if _caught_by_tensorflow(NOTICE_SETTLE_SECONDS) == self._own_task:
            if not self._event.is_set():
                log.warning("SIGTERM received while the strategy started: %s", self._when)
            self._event.set()

    def _handle(self, signum: int, frame: Any) -> None:
        if not self._event.is_set():
            log.warning("SIGTERM received: %s", self._when)
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


def when_saved(steps_per_execution: int) -> str:
    """When a SIGTERM's save comes, as the user is told it: PreemptionCheckpointHandler has
    every worker save at the end of the execution after the one the signalled worker is in
    (its run count + 1), so up to two executions from the signal."""
    if steps_per_execution <= 1:
        return (
            "every worker saves at the next step boundary they all reach (the step after this one)"
        )
    return (
        "every worker saves at the next step boundary they all reach: the end of the execution "
        f"after this one, up to {2 * steps_per_execution} steps from now (steps run "
        f"{steps_per_execution} at a time, --steps-per-execution)"
    )


def _caught_by_tensorflow(seconds: float) -> str | None:
    """The task named by TensorFlow's SIGTERM notice, once there is one, waiting up to
    `seconds` for it; None if none came."""
    try:
        ms = int(seconds * 1000)
        return str(context.context().get_config_key_value(NOTICE_KEY, timeout_in_ms=ms))
    except tf.errors.OpError:  # absent (DeadlineExceeded), or no coordination service
        return None


def own_task(strategy: tf.distribute.Strategy) -> str | None:
    """This worker's task as TensorFlow's SIGTERM notice names it; None for one worker."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return None
    return f"/job:{resolver.task_type}/task:{resolver.task_id}"


@contextlib.contextmanager
def _not_on_gcp() -> Iterator[None]:
    """Make the handler take its Kubernetes/Borg configuration everywhere.

    On GCE it probes the metadata server (up to 5 s) and, on a CPU VM (a GKE CPU node),
    disables itself; on a GPU VM it would poll GCE maintenance events instead of our flag.
    Everything it needs is in our TerminationConfig, so the platform must not matter.
    """
    original = failure_handling_util.on_gcp
    failure_handling_util.on_gcp = lambda: False
    try:
        yield
    finally:
        failure_handling_util.on_gcp = original


def preemption_step(epoch: int, batch: int, steps_per_epoch: int) -> int:
    """Global step count after finishing `batch` (0-based) of `epoch` (0-based)."""
    return epoch * steps_per_epoch + batch + 1


class PreemptionBackup(keras.callbacks.BackupAndRestore):  # type: ignore[misc]
    """BackupAndRestore that also saves on SIGTERM (to any worker) and raises Preempted.

    Also records the LAST step of each `steps_per_execution` group as the saved batch
    (tf-keras records the first, so a restart would redo steps_per_execution - 1 steps).
    """

    def __init__(
        self,
        backup_dir: str,
        save_freq: str | int,
        sigterm: SigtermFlag,
        steps_per_epoch: int,
    ) -> None:
        super().__init__(backup_dir, save_freq=save_freq)
        self._sigterm = sigterm
        self._steps_per_epoch = steps_per_epoch
        self._scratch = ""
        self._handler: Any = None
        self._last_batch = -1

    def _implements_train_batch_hooks(self) -> bool:
        return True  # the preemption check runs after every step (execution)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        super().on_train_begin(logs)
        state = self._training_state
        strategy = self.model.distribute_strategy
        # The handler insists on a checkpoint to restore; it gets an empty one, so its run
        # counter starts at 0 on every worker (the real state is restored by tf-keras, and
        # saved through save_fn).
        # One level down: a non-chief's handler writes into
        # <parent>/workertemp_<task>/, which must not be a shared /tmp/workertemp_<task>
        # (two local runs on one machine removed each other's).
        self._scratch = os.path.join(tempfile.mkdtemp(prefix="tflaunch-preemption-"), "ckpt")
        config = tf.distribute.experimental.TerminationConfig(
            termination_watcher_fn=self._sigterm.is_set,
            exit_fn=self._exit,
            grace_period=0,
            save_fn=self._save,
        )
        with _not_on_gcp():
            self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                strategy.cluster_resolver, tf.train.Checkpoint(), self._scratch, config
            )
        # What tf-keras' WorkerTrainingState does itself with save_before_preemption: its
        # batch hook then calls the handler, and the resume rule becomes per step.
        state._enable_save_before_preemption = True
        state.preemption_handler = self._handler
        self.model._preemption_handler = self._handler

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._training_state._ckpt_saved_batch.assign(batch)
        self._last_batch = batch
        super().on_train_batch_end(batch, logs)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self._stop_handler()
        super().on_train_end(logs)

    def _save(self) -> None:
        self._training_state.back_up(epoch=self._current_epoch, batch=self._last_batch)

    def _exit(self) -> None:
        step = preemption_step(self._current_epoch, self._last_batch, self._steps_per_epoch)
        self._remove_scratch()
        raise Preempted(
            f"preempted: every worker saved at step {step} (epoch {self._current_epoch + 1}, "
            f"step {self._last_batch + 1} of {self._steps_per_epoch}); exiting "
            f"{contract.EXIT_PREEMPTED}: the group resumes there when it runs again"
        )

    def _stop_handler(self) -> None:
        """Stop the handler's watcher threads (they would block the next handler's keys)."""
        if self._handler is not None:
            self._handler._stop_cluster_wise_termination_watcher_thread()
            stop_polling(self._handler)
            self._handler = None
        self._remove_scratch()

    def _remove_scratch(self) -> None:
        if self._scratch:
            shutil.rmtree(os.path.dirname(self._scratch), ignore_errors=True)


def stop_polling(handler: Any) -> None:
    """Tell the handler's SIGTERM-polling thread to stop, without waiting for it.

    TensorFlow's own `_stop_poll_termination_signal_thread` joins the thread, which sleeps
    1 s between polls (`time.sleep(1)`), so every `fit` ended waiting up to 1 s for that
    sleep, on every worker (issue 26, the end-of-fit stall: 0.7-1.0 s of `on_train_end`).
    The thread is a daemon and checks the stop flag as soon as it wakes, before polling
    again; it ends by itself.
    """
    if getattr(handler, "_poll_termination_signal_thread", None) is not None:
        handler._poll_termination_signal_thread_should_stop.set()
        handler._poll_termination_signal_thread = None
