"""`python -m trainer`: preflight, then training; errors become exit codes.

`main()` is the only place that turns exceptions into a message and an exit code
(`program()` is the program without error handling). The order of `program()` matters:
the environment is fixed before TensorFlow is imported, and every check that can fail
fast runs before the strategy waits for peers.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence

from launcher.core import contract
from trainer import data, logs, phases, preflight
from trainer.config import TrainConfig, parse_args
from trainer.curves_process import CurvesProcess
from trainer.errors import ConfigError, TrainerError
from trainer.plan import TrainingPlan

log = logging.getLogger("trainer")

_failure: list[BaseException] = []
"""The exception the last failed run ended with, kept until the process exits. Releasing it
frees its frames' tf.data iterators, and that destructor can wait on a background thread for
seconds (docs/performance.md, "Stalls at the end of fit"; once 47 s): a preempted worker that
had saved sat there until its peer's heartbeats timed out, and the group's restart waited for
it. `python -m trainer` ends with os._exit as soon as main() returns."""


def restarts_from_env() -> int:
    """How often the group was restarted before this run ($TFLAUNCH_RESTARTS)."""
    raw = os.environ.get(contract.ENV_RESTARTS, "0") or "0"
    try:
        return max(0, int(raw))
    except ValueError:
        raise ConfigError(f"${contract.ENV_RESTARTS} must be an integer, got {raw!r}") from None


def import_tensorflow_meanwhile() -> threading.Thread:
    """Start importing TensorFlow and tf-keras in a background thread, and return it.

    The import (seconds) then overlaps reading the data and the checks before
    `preflight.check_devices`, whose own `import tensorflow` waits for this one to finish
    (Python's import lock) instead of starting over. Code that runs meanwhile must import
    `tensorflow` before `tf_keras` (see `data.download_with_keras`). Call it only after
    `preflight.prepare_environment` (TensorFlow reads that environment when it loads) and
    after the checks that refuse a bad configuration in milliseconds. A failed import is
    left for the main thread's own import to report.
    """

    def load() -> None:
        with contextlib.suppress(BaseException):
            import tensorflow  # noqa: F401
            import tf_keras  # noqa: F401

    thread = threading.Thread(target=load, name="import-tensorflow", daemon=True)
    thread.start()
    return thread


def make_plan(
    config: TrainConfig,
    cluster: preflight.WorkerGroup,
    mnist: data.Mnist,
    gpus: int,
    pinned: set[int] | None = None,
) -> TrainingPlan:
    """Batch and step arithmetic, checked before any peer is contacted; `pinned`: the CPUs
    `preflight.pin_to_cpu_share` kept this worker on."""
    replicas = cluster.num_workers * max(1, gpus)
    per_replica = preflight.per_replica_batch(config.global_batch_size, replicas)
    eval_batch = data.eval_batch_size(len(mnist.y_test), config.global_batch_size)
    return TrainingPlan(
        workers=cluster.num_workers,
        replicas=replicas,
        gpus_per_worker=gpus,
        global_batch_size=config.global_batch_size,
        per_replica_batch=per_replica,
        steps_per_epoch=data.steps_per_epoch(
            len(mnist.y_train), config.global_batch_size, config.steps_per_epoch
        ),
        eval_batch_size=eval_batch,
        eval_steps=data.eval_steps(len(mnist.y_test), eval_batch),
        threads=preflight.thread_count(config.threads, cluster.workers_on_this_host, pinned),
    )


def program(config: TrainConfig, env_warning: str | None, debug: bool = False) -> int:
    """The trainer without error handling."""
    cluster = preflight.parse_tf_config(os.environ.get(contract.ENV_TF_CONFIG))
    logs.configure(cluster.label, debug)
    preflight.check_worker_index(cluster, os.environ.get(contract.ENV_WORKER_INDEX))
    pinned = preflight.pin_to_cpu_share(config.threads, cluster)  # before any thread starts
    import_tensorflow_meanwhile()  # while the data is read; the flags and TF_CONFIG are sane
    if env_warning:
        log.warning("%s", env_warning)
    if cluster.is_multi_worker:
        log.info(
            "worker %d of %d at %s (chief: %s)",
            cluster.index,
            cluster.num_workers,
            cluster.address,
            cluster.workers[0],
        )
    else:
        log.info("no multi-worker TF_CONFIG: running single-worker")
    if pinned:
        log.info(
            "on CPU(s) %s: %d workers share this host (--threads auto)",
            ",".join(str(cpu) for cpu in sorted(pinned)),
            cluster.workers_on_this_host,
        )
    restarts = restarts_from_env()
    mnist = data.load_mnist(config.data).limited(
        config.max_train_examples, config.max_test_examples
    )
    timings = phases.Phases()
    with timings.measure("import"):  # check_devices imports TensorFlow
        gpus = preflight.check_devices(config.expect_gpus, cluster.label)
    plan = make_plan(config, cluster, mnist, gpus, pinned)
    log.info("plan: %s", plan)

    with timings.measure("import"):
        from trainer import train  # imports TensorFlow; the environment is ready by now
        from trainer.watchdog import Watchdog

    train.configure_threads(plan.threads)
    # The chief's curves.png: a process of its own, warming matplotlib up while we train.
    # Started here, not between the rendezvous and the strategy: the peers connect to this
    # port the moment our stand-in listener closes, and TensorFlow must be bound by then.
    curves = (
        CurvesProcess(config.model_dir, _run_label(config.model_dir), cluster.label)
        if cluster.is_chief
        else None
    )
    try:
        preflight.rendezvous(cluster, config.rendezvous_timeout)
        if cluster.is_multi_worker and not cluster.is_chief:
            preflight.await_tensorflow(cluster.workers[0], preflight.HANDOVER_SECONDS)
        # Under the worker wrapper the preflight made it; run bare, the history file needs it.
        preflight.check_writable(config.checkpoint_dir, cluster.label)
        checkpoint_dir = config.checkpoint_dir or tempfile.mkdtemp(prefix="tflaunch-ckpt-")
        if not config.checkpoint_dir:
            log.warning(
                "no --checkpoint-dir: backups go to %s, so a restart starts over", checkpoint_dir
            )
        watchdog = Watchdog(
            alive_file=os.environ.get(contract.ENV_ALIVE_FILE), frozen_after=config.stall_timeout
        )
        result = train.run(
            config,
            cluster,
            mnist,
            plan,
            checkpoint_dir,
            watchdog,
            restarts,
            timings,
            before_export=curves.start if curves is not None else lambda result: None,
        )
    except BaseException:
        if curves is not None:
            curves.abandon()
        raise
    result["phases"] = timings.as_dict()
    log.info("phases: %s", phases.describe(result["phases"]))
    watchdog.stop()
    if not config.checkpoint_dir:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    if cluster.is_chief:
        train.publish_result(result, config.model_dir)
    if curves is not None:
        curves.wait()  # drawn while the model was exported
    log.info("done")
    return contract.EXIT_OK


def _run_label(model_dir: str) -> str:
    """The run's name in curves.png: the directory above the model (the job's name in a pod
    and in `tflaunch local`'s default workdir)."""
    parent = os.path.basename(os.path.dirname(os.path.abspath(model_dir)))
    return parent or "run"


def disk_full(error: BaseException) -> bool:
    """ENOSPC or EDQUOT, from Python or as TensorFlow words it in its own error."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(error)
    return any(os.strerror(code) in text for code in (errno.ENOSPC, errno.EDQUOT))


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags, run, and map failures (a bad flag included) to exit codes.

    Every failure ends in one ERROR line of the trainer's own format, which is what
    `tflaunch local` and `tflaunch status` quote as the reason.
    """
    debug = contract.debug_requested(os.environ)
    logs.configure("worker ?", debug)
    try:
        config = parse_args(argv)
        env_warning = preflight.prepare_environment(os.environ, config.expect_gpus, debug)
        return program(config, env_warning, debug)
    except TrainerError as e:
        _failure[:] = [e]
        # Preempted is not a failure: the group restarts and resumes where it saved.
        log.log(
            logging.WARNING if e.exit_code == contract.EXIT_PREEMPTED else logging.ERROR, "%s", e
        )
        return e.exit_code
    except Exception as e:
        _failure[:] = [e]
        if disk_full(e):  # the group restarts would fill it again: not retried
            log.error(
                "no space left on a volume this worker writes (%s); free space or give the "
                "checkpoint volume more, then run again; not retried",
                " ".join(str(e).split())[:300],
            )
            return contract.EXIT_CONFIG_ERROR
        log.exception(
            "unexpected failure (%s: %s); exiting %d so the Job retries",
            type(e).__name__,
            " ".join(str(e).split()),
            contract.EXIT_TRANSIENT,
        )
        return contract.EXIT_TRANSIENT
