"""Training under MultiWorkerMirroredStrategy: strategy, fit, evaluate, export, result.

Imports TensorFlow, so it is imported only after `preflight.prepare_environment` (see
`trainer.main`). Every worker runs the same code; the differences between the chief and
the others are confined to where files go (`export_model`, `publish_result`), because
every collective (each step, each save) needs all workers to take part.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf
import tf_keras as keras

from launcher.core import contract
from trainer import data, evaluate, heartbeat, phases, precision, preemption, progress, summaries
from trainer import model as model_lib
from trainer.config import SAVE_FREQ_EPOCH, TrainConfig
from trainer.errors import ConfigError, TransientError
from trainer.plan import TrainingPlan
from trainer.preflight import WorkerGroup
from trainer.watchdog import Watchdog

log = logging.getLogger(__name__)

BACKUP_SUBDIR = "chief"
"""Where tf-keras' BackupAndRestore keeps the checkpoint that every worker restores."""
HISTORY_FILE = "tflaunch-history.json"
"""Per-epoch metrics of earlier runs, written by the chief next to the backup."""
TRANSIENT_TF_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
)
"""What a dead, frozen or restarted peer looks like from a surviving worker."""


# --- strategy ----------------------------------------------------------------------------


def configure_threads(threads: int) -> None:
    """Bound TensorFlow's thread pools; must run before the runtime starts (0 = default)."""
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)


def make_strategy(gpus: int, collective_timeout: float) -> tf.distribute.Strategy:
    """MWMS with NCCL on GPUs, RING on CPUs, and a per-collective timeout.

    Reads TF_CONFIG (already checked by preflight) and starts this worker's gRPC server.
    """
    implementation = (
        tf.distribute.experimental.CommunicationImplementation.NCCL
        if gpus
        else tf.distribute.experimental.CommunicationImplementation.RING
    )
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=implementation,
        timeout_seconds=collective_timeout or None,
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


# --- resume ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ResumePoint:
    """Where BackupAndRestore will continue: (0, 0) on a fresh start."""

    epoch: int
    step: int


def _saved_counter(reader: Any, name: str) -> int:
    return int(reader.get_tensor(f"{name}/.ATTRIBUTES/VARIABLE_VALUE"))


def resume_point(checkpoint_dir: str, steps_per_epoch: int) -> ResumePoint:
    """Read the epoch/step BackupAndRestore will resume at, before `fit` restores it.

    Reads the same checkpoint and applies the same rule as tf-keras'
    `WorkerTrainingState.maybe_load_initial_counters_from_ckpt` with per-step saving (which
    `preemption.PreemptionBackup` always uses: an epoch-end backup records the epoch's last
    step), so the reported resume point is where training really continues.
    """
    latest = tf.train.latest_checkpoint(os.path.join(checkpoint_dir, BACKUP_SUBDIR))
    if latest is None:
        return ResumePoint(0, 0)
    reader = tf.train.load_checkpoint(latest)
    epoch = _saved_counter(reader, "ckpt_saved_epoch")
    batch = _saved_counter(reader, "ckpt_saved_batch")
    if batch < 0:
        return ResumePoint(0, 0)
    if batch == steps_per_epoch - 1:
        return ResumePoint(epoch + 1, 0)
    return ResumePoint(epoch, batch + 1)


def backup_frequency(save_freq: str | int, steps_per_execution: int) -> str | int:
    """BackupAndRestore's save_freq for a --save-freq given in steps.

    BackupAndRestore counts batch-end callbacks, and with steps_per_execution=N there
    is one callback per N steps: convert steps to executions (rounding up).
    """
    if save_freq == SAVE_FREQ_EPOCH:
        return save_freq
    return max(1, -(-int(save_freq) // steps_per_execution))


def read_history(checkpoint_dir: str, epochs: int) -> list[dict[str, float]]:
    """Metrics of the first `epochs` epochs, recorded by an earlier run of the group."""
    try:
        with open(os.path.join(checkpoint_dir, HISTORY_FILE), encoding="utf-8") as f:
            return list(json.load(f))[:epochs]
    except (OSError, ValueError):
        return []


# --- callbacks ---------------------------------------------------------------------------


class EpochLogCallback(keras.callbacks.Callback):  # type: ignore[misc]
    """Logs each epoch on every worker, feeds the watchdog, records history (chief)."""

    def __init__(
        self,
        epochs: int,
        watchdog: Watchdog,
        history: list[dict[str, float]],
        history_path: str | None,
        restart: int = 0,
    ) -> None:
        super().__init__()
        # Batch hooks get the logs as tensors: converting them to numpy would block every
        # step until the all-reduce finished, serializing input, compute and comms.
        self._supports_tf_logs = True
        self._epochs = epochs
        self._watchdog = watchdog
        self._history = history
        self._history_path = history_path
        self._restart = restart
        self._epoch_started = time.monotonic()

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch_started = time.monotonic()
        self._watchdog.beat()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._watchdog.beat()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._watchdog.beat()
        metrics = epoch_record(logs or {}, self._restart)
        log.info(
            "epoch %d/%d: loss=%.4f accuracy=%.4f (%.1fs)",
            epoch + 1,
            self._epochs,
            metrics["loss"],
            metrics["accuracy"],
            time.monotonic() - self._epoch_started,
        )
        del self._history[epoch:]
        self._history.append(metrics)
        if self._history_path:
            _write_json(self._history_path, self._history)


class FitPhases(keras.callbacks.Callback):  # type: ignore[misc]
    """Splits `fit`'s wall time into `first_step`, `fit` and `fit_end` (trainer.phases).

    The epoch-end evaluations run inside `fit`; they are `evaluate`'s, so each part leaves
    out what `evaluation_seconds` (EpochEvaluation's running total) grew by meanwhile.
    """

    def __init__(self, evaluation_seconds: Callable[[], float]) -> None:
        super().__init__()
        self._supports_tf_logs = True  # no host sync: the step has returned by the hook
        self._evaluation_seconds = evaluation_seconds
        self._called: tuple[float, float] | None = None
        self._first: tuple[float, float] | None = None
        self._last: tuple[float, float] | None = None

    def _mark(self) -> tuple[float, float]:
        return time.monotonic(), self._evaluation_seconds()

    def fit_called(self) -> None:
        """Just before `model.fit`."""
        self._called = self._mark()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._last = self._mark()
        if self._first is None:
            self._first = self._last

    def fit_returned(self, into: phases.Phases) -> float:
        """Just after `model.fit`: add the three parts into `into`; returns their sum, fit's
        wall time less its evaluations (result.json's `fit_seconds`, read off the same
        clock marks so that the two never disagree)."""
        returned = self._mark()
        called = self._called or returned
        first = self._first or returned  # no step ran (resumed after the last one)
        last = self._last or returned
        for name, (start, end) in (
            ("first_step", (called, first)),
            ("fit", (first, last)),
            ("fit_end", (last, returned)),
        ):
            into.add(name, (end[0] - start[0]) - (end[1] - start[1]))
        return (returned[0] - called[0]) - (returned[1] - called[1])


KEPT_ALIVE: list[Any] = []
"""Keras' training iterators, never freed: `python -m trainer` ends with os._exit."""


class KeepTrainingIterator(keras.callbacks.Callback):  # type: ignore[misc]
    """Keeps `fit`'s training iterator alive after `fit` returns, until the process exits.

    tf-keras frees it when `fit`'s frame ends, and that destructor joins the iterator's tf.data
    autotuning thread. TensorFlow can lose the wake-up that ends the thread (its
    CancellationManager runs the callbacks before it marks itself cancelled), which then
    sleeps out its optimization period, doubling up to 60 s: 4-10 s here, on one worker,
    while its peers waited in the next collective (`phases.fit_end`; docs/performance.md).
    Keras' input path has autotuned iterators of its own, so turning autotuning off in our
    datasets is not enough. tf-keras keeps the iterator in `fit`'s local `iterator` (and its
    DataHandler in `data_handler`).
    """

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        frame = sys._getframe(1)
        while frame is not None:
            names = frame.f_locals
            if frame.f_code.co_name == "fit" and "data_handler" in names:
                KEPT_ALIVE.append((names.get("iterator"), names["data_handler"]))
                return
            frame = frame.f_back  # type: ignore[assignment]
        log.debug("fit's training iterator not found: it is freed when fit returns")


def epoch_record(logs: Mapping[str, Any], restart: int) -> dict[str, float]:
    """One epoch of the history: train loss/accuracy, test ones when evaluated (`val_*`
    from `summaries.EpochEvaluation`), and the restart that ran it (restarts marked in
    curves.png)."""
    record = {"loss": float(logs["loss"]), "accuracy": float(logs["accuracy"])}
    for name in ("loss", "accuracy"):
        if f"val_{name}" in logs:
            record[f"test_{name}"] = float(logs[f"val_{name}"])
    record["restart"] = restart
    return record


def history_lists(history: list[dict[str, float]]) -> dict[str, list[float | None]]:
    """result.json's history: one list per key, one entry per epoch (None: not recorded,
    e.g. an epoch of an earlier run that did not evaluate)."""
    keys = ("loss", "accuracy", "test_loss", "test_accuracy", "restart")
    return {key: [epoch.get(key) for epoch in history] for key in keys}


def _write_json(path: str, value: Any) -> None:
    """Write atomically: a reader (a restarted worker) never sees half a file."""
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(value, f)
    os.replace(temporary, path)


# --- export and result -------------------------------------------------------------------


def export_model(model: keras.Model, model_dir: str, is_chief: bool) -> None:
    """Save a SavedModel: the chief into `model_dir`, the others into a temp dir.

    Every worker must call save (reading distributed variables is a collective), but
    only the chief's copy is kept.
    """
    target = model_dir if is_chief else tempfile.mkdtemp(prefix="tflaunch-export-")
    try:
        model.save(target, save_format="tf")
    finally:
        if not is_chief:
            shutil.rmtree(target, ignore_errors=True)


def publish_result(result: dict[str, Any], model_dir: str) -> None:
    """Write result.json and print it as one `TFLAUNCH_RESULT {json}` line (chief only)."""
    os.makedirs(model_dir, exist_ok=True)
    _write_json(os.path.join(model_dir, contract.RESULT_FILE), result)
    print(contract.RESULT_LINE_PREFIX + json.dumps(result, sort_keys=True), flush=True)


# --- the run -----------------------------------------------------------------------------


FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")
"""TensorFlow's prefix naming the graph node, e.g. `{{function_node
__wrapped__CollectiveReduceV2_..._device_/job:worker/replica:0/task:0/device:CPU:0}}`."""


def _first_line(message: str) -> str:
    """The message's first line, with the next one when it ends in a colon: "The following
    tasks are unhealthy (stopped sending heartbeats):" is followed by the task names."""
    lines = [line.strip() for line in message.strip().splitlines()] or [""]
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def _transient(phase: str, error: tf.errors.OpError) -> TransientError:
    first_line = FUNCTION_NODE.sub("", _first_line(error.message or str(error)))
    return TransientError(
        f"{phase} failed because a peer died, froze or restarted "
        f"({type(error).__name__}: {first_line}); exiting {contract.EXIT_TRANSIENT}, which "
        "may be retried: a restarted group resumes from the last checkpoint"
    )


def build_compiled_model(strategy: tf.distribute.Strategy, config: TrainConfig) -> Any:
    """Everything that creates variables (model AND optimizer) goes under the scope.

    The dtype policy is set first: layers take it when they are created.
    """
    precision.apply(config.precision)
    with strategy.scope():
        model = model_lib.build_model()
        model_lib.compile_model(
            model, config.learning_rate, config.steps_per_execution, config.jit_compile
        )
    return model


def run(
    config: TrainConfig,
    cluster: WorkerGroup,
    mnist: data.Mnist,
    plan: TrainingPlan,
    checkpoint_dir: str,
    watchdog: Watchdog,
    restarts: int,
    timings: phases.Phases | None = None,
    before_export: Callable[[Mapping[str, Any]], None] = lambda result: None,
) -> dict[str, Any]:
    """Train, evaluate and export; return the result every worker computed.

    `timings` receives every phase from `strategy` to `export` (trainer.phases).
    `before_export` gets the result once it is known, before the model is exported (the
    chief starts drawing curves.png then, so the drawing overlaps the export).

    Raises:
        TransientError: a peer failed during training, evaluation or export.
    """
    timings = timings or phases.Phases()
    model_lib.require_tf_keras()
    tf.keras.utils.set_random_seed(config.seed)
    watchdog.arm("cluster start", config.rendezvous_timeout, contract.EXIT_RENDEZVOUS_TIMEOUT)
    started = time.monotonic()
    heartbeat.configure(plan.workers, config.heartbeat_timeout)
    strategy = make_strategy(plan.gpus_per_worker, config.collective_timeout)
    log.info("strategy ready in %.1fs", time.monotonic() - started)
    timings.add("strategy", time.monotonic() - started)
    setup_started = time.monotonic()
    watchdog.disarm()
    if strategy.num_replicas_in_sync != plan.replicas:
        raise ConfigError(
            f"planned {plan.replicas} replicas but the strategy has "
            f"{strategy.num_replicas_in_sync}; do all workers see the same GPUs?"
        )
    # TensorFlow's coordination service took SIGTERM over when the strategy started.
    sigterm = preemption.SigtermFlag(preemption.own_task(strategy), config.steps_per_execution)
    sigterm.install()
    resume = resume_point(checkpoint_dir, plan.steps_per_epoch)
    resumed_at = resume.epoch * plan.steps_per_epoch + resume.step
    if resume.epoch or resume.step:
        log.info(
            "resuming from the backup in %s at step %d (epoch %d, step %d)",
            checkpoint_dir,
            resumed_at,
            resume.epoch + 1,
            resume.step,
        )
    history = read_history(checkpoint_dir, resume.epoch)
    model = build_compiled_model(strategy, config)
    # CPU workers: no tf.data autotuning and no per-device prefetch (MultiDeviceIterator):
    # fewer autotuning threads for an iterator's teardown to wait out (`KeepTrainingIterator`).
    on_cpu = not plan.gpus_per_worker
    train = data.train_dataset(mnist, plan.global_batch_size, config.seed, autotune=not on_cpu)
    # The same stream as an uninterrupted run from the step it stopped at: the pipeline is
    # deterministic (seeded shuffle), so skipping the batches already trained on is exact.
    train = train.skip(resumed_at)
    test = data.eval_dataset(mnist, plan.eval_batch_size, autotune=not on_cpu)
    if on_cpu:
        no_fetch = tf.distribute.InputOptions(experimental_fetch_to_device=False)
        train = strategy.experimental_distribute_dataset(train, options=no_fetch)
        test = strategy.experimental_distribute_dataset(test, options=no_fetch)
    # First: the callbacks after it see each epoch's test scores (history, TensorBoard).
    epoch_eval = summaries.EpochEvaluation(strategy, test, plan.eval_steps, watchdog.beat)
    tensorboard = (
        summaries.TensorBoardWriter(config.tensorboard_dir, plan.global_batch_size)
        if cluster.is_chief and config.tensorboard_dir and summaries.tensorboard_installed()
        else None
    )
    fit_phases = FitPhases(lambda: epoch_eval.seconds)
    callbacks = [
        epoch_eval,
        EpochLogCallback(
            config.epochs,
            watchdog,
            history,
            os.path.join(checkpoint_dir, HISTORY_FILE) if cluster.is_chief else None,
            restart=restarts,
        ),
        preemption.PreemptionBackup(
            checkpoint_dir,
            backup_frequency(config.save_freq, config.steps_per_execution),
            sigterm,
            plan.steps_per_epoch,
        ),
        # The chief's TFLAUNCH_PROGRESS lines (tflaunch local's bar, the operator's status).
        progress.ProgressCallback(plan.global_batch_size, chief=cluster.is_chief),
        *([tensorboard] if tensorboard is not None else []),
        KeepTrainingIterator(),
        fit_phases,  # last: each step's end, after every other callback's work
    ]
    timings.add("setup", time.monotonic() - setup_started)

    watchdog.arm("training", config.stall_timeout)
    try:
        fit_phases.fit_called()
        model.fit(
            train,
            epochs=config.epochs,
            steps_per_epoch=plan.steps_per_epoch,
            callbacks=callbacks,
            verbose=0,
        )
        fit_seconds = max(fit_phases.fit_returned(timings), 1e-6)
    except TRANSIENT_TF_ERRORS as e:
        raise _transient("training", e) from None
    try:
        watchdog.arm("evaluation", config.stall_timeout)
        started = time.monotonic()
        scores = epoch_eval.scores.get(config.epochs - 1) or evaluate.evaluate(
            strategy, model, test, plan.eval_steps, watchdog.beat
        )  # the last epoch's evaluation is the final one: same weights
        evaluated = time.monotonic()
        evaluation_seconds = epoch_eval.seconds + evaluated - started
        timings.add("evaluate", evaluation_seconds)
    except TRANSIENT_TF_ERRORS as e:
        raise _transient("evaluation", e) from None

    steps_run = (config.epochs - resume.epoch) * plan.steps_per_epoch - resume.step
    result = {
        "test_accuracy": scores.accuracy,
        "test_loss": scores.loss,
        "test_examples": scores.examples,
        "dataset": mnist.dataset,
        "epochs": config.epochs,
        "workers": plan.workers,
        "replicas": plan.replicas,
        "global_batch_size": plan.global_batch_size,
        "steps_per_epoch": plan.steps_per_epoch,
        "images_per_sec": round(max(0, steps_run) * plan.global_batch_size / fit_seconds, 1),
        "fit_seconds": round(fit_seconds, 3),
        "restarts": restarts,
        "resumed_from_epoch": resume.epoch,
        "resumed_from_step": resumed_at,
        "optimizer_steps": int(model.optimizer.iterations.numpy()),
        "history": history_lists(history),
        "weights_sha256": model_lib.weights_digest(model),
    }
    before_export(result)
    try:
        watchdog.arm("export", config.stall_timeout)
        export_model(model, config.model_dir, cluster.is_chief)
        timings.add("export", time.monotonic() - evaluated)
        log.info(
            "test set evaluated in %.1fs in all, exported in %.1fs",
            evaluation_seconds,
            time.monotonic() - evaluated,
        )
    except TRANSIENT_TF_ERRORS as e:
        raise _transient("export", e) from None
    watchdog.disarm()

    log.info(
        "test accuracy %.4f, loss %.4f over %d examples; %.0f images/s; weights sha256 %s",
        scores.accuracy,
        scores.loss,
        scores.examples,
        steps_run * plan.global_batch_size / fit_seconds,
        result["weights_sha256"],
    )
    if tensorboard is not None:
        tensorboard.evaluation(scores, config.epochs * plan.steps_per_epoch)
    if cluster.is_chief:
        _remove(os.path.join(checkpoint_dir, HISTORY_FILE))
    return result


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
