"""Timestamps of a trainer process's phases, for bench_startup.py and bench_recovery.py.

Python imports `sitecustomize` at start-up from the first sys.path entry that has one; the
benchmarks put this directory first on PYTHONPATH and set TFLAUNCH_BENCH_PHASES to a
directory. Every `python -m trainer` process then appends one JSON line per phase to
DIR/<pid>.jsonl, by wrapping the trainer's own functions (the trainer is not modified):

  start          exec of the process (/proc/self/stat, 10 ms resolution)
  python         this file runs: the interpreter is up
  data           data.load_mnist returned
  tensorflow     preflight.check_devices returned (TensorFlow imported, devices listed)
  peers          preflight.rendezvous returned (every peer's port accepts TCP)
  strategy       train.make_strategy returned (gRPC server up, coordination service joined)
  model          train.build_compiled_model returned
  restored       BackupAndRestore.on_train_begin returned (checkpoint restored, if any)
  first_step     the first on_train_batch_end (one execution: steps_per_execution steps,
                 tracing included)
  save_begin/save_end  around each BackupAndRestore save
  fit_end        fit returned its last epoch (on_train_end)
Each event also carries the process's CPU time so far (time.process_time()).
  exit           interpreter exit (not written on SIGKILL or os._exit)

Levers tried by bench_scaling.py without changing the trainer, also set by environment:
  TFLAUNCH_BENCH_BYTES_PER_PACK=N       CommunicationOptions(bytes_per_pack=N) on the strategy
  TFLAUNCH_BENCH_ALLREDUCE_DTYPE=float16|bfloat16   gradients cast to it for the all-reduce

Only `python -m trainer.run` (the worker wrapper: role "wrapper", which records start,
python, peers and exit) and `python -m trainer` (role "trainer") are recorded; without
TFLAUNCH_BENCH_PHASES this file does nothing.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import time
from typing import Any

_DIR = os.environ.get("TFLAUNCH_BENCH_PHASES")


def _process_start() -> float:
    """Wall-clock time of this process's exec: now minus its age. The age is uptime minus
    the start in clock ticks since boot, both on the kernel's boot clock (10 ms steps)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def _role() -> str | None:
    """ "wrapper" (python -m trainer.run), "trainer" (python -m trainer), else None."""
    with open("/proc/self/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    module = argv[argv.index(b"-m") + 1] if b"-m" in argv[:-1] else b""
    return {b"trainer.run": "wrapper", b"trainer": "trainer"}.get(module)


_ROLE = _role() if _DIR else None


def _event(name: str, when: float | None = None) -> None:
    assert _DIR is not None
    record = {
        "event": name,
        "role": _ROLE,
        "t": time.time() if when is None else when,
        "cpu": time.process_time(),
        "pid": os.getpid(),
        "worker": os.environ.get("WORKER_INDEX", "0"),
        "restart": int(os.environ.get("TFLAUNCH_RESTARTS", "0") or 0),
    }
    with open(os.path.join(_DIR, f"{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")


def _after(owner: Any, name: str, event: str, then: Any = None) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        _event(event)
        if then is not None:
            then()
        return result

    setattr(owner, name, wrapper)


def _levers() -> None:
    import tensorflow as tf

    from trainer import train

    pack = os.environ.get("TFLAUNCH_BENCH_BYTES_PER_PACK")
    if pack:

        def make_strategy(gpus: int, collective_timeout: float) -> Any:
            options = tf.distribute.experimental.CommunicationOptions(
                bytes_per_pack=int(pack),
                implementation=tf.distribute.experimental.CommunicationImplementation.RING,
                timeout_seconds=collective_timeout or None,
            )
            return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)

        train.make_strategy = make_strategy
    dtype = os.environ.get("TFLAUNCH_BENCH_ALLREDUCE_DTYPE")
    if dtype:
        from tf_keras.src.optimizers import optimizer

        aggregate = optimizer.Optimizer.aggregate_gradients

        def reduced_precision(self: Any, grads_and_vars: Any) -> Any:
            pairs = [(tf.cast(g, dtype), v) for g, v in grads_and_vars]
            return [(tf.cast(g, v.dtype), v) for g, v in aggregate(self, pairs)]

        optimizer.Optimizer.aggregate_gradients = reduced_precision


def _patch_training() -> None:
    """Once TensorFlow is imported (check_devices did it), wrap the training phases."""
    import tf_keras

    from trainer import train

    _levers()
    _after(train, "make_strategy", "strategy")
    _after(train, "build_compiled_model", "model")
    backup = tf_keras.callbacks.BackupAndRestore
    _after(backup, "on_train_begin", "restored")
    save = backup._backup

    def timed_save(self: Any, *args: Any, **kwargs: Any) -> Any:
        _event("save_begin")
        result = save(self, *args, **kwargs)
        _event("save_end")
        return result

    backup._backup = timed_save
    batch_end = train.EpochLogCallback.on_train_batch_end
    seen: list[bool] = []

    def first_batch_end(self: Any, batch: int, logs: Any = None) -> Any:
        if not seen:
            seen.append(True)
            _event("first_step")
        return batch_end(self, batch, logs)

    train.EpochLogCallback.on_train_batch_end = first_batch_end
    _after(train.EpochLogCallback, "on_train_end", "fit_end")


def _install() -> None:
    os.makedirs(_DIR or ".", exist_ok=True)
    _event("start", _process_start())
    _event("python")
    atexit.register(_event, "exit")
    from trainer import preflight

    _after(preflight, "rendezvous", "peers")
    if _ROLE == "trainer":
        from trainer import data

        _after(data, "load_mnist", "data")
        _after(preflight, "check_devices", "tensorflow", then=_patch_training)


if _ROLE:
    _install()
