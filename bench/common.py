"""What the training benchmarks share: the machine's description, the synthetic data, a
trainer process, and min/median/max over interleaved repeats.

This machine is shared with other work, so absolute figures are noisy: every benchmark runs
its variants alternately (A B A B ...), reports medians and ratios of the same run, and
records the load average next to each figure.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FULL = os.environ.get("BENCH") == "full" or os.environ.get("FULL") == "1"
"""`make bench FULL=1` (or BENCH=full): the long versions."""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load() -> str:
    """The 1/5/15-minute load averages, e.g. "1.9/2.3/2.0"."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def machine() -> str:
    """One line: CPU, cores, flags that matter, Python and TensorFlow versions."""
    try:
        from importlib.metadata import version

        tf_version = version("tensorflow")
    except Exception:
        tf_version = "?"
    flags = ""
    try:
        text = Path("/proc/cpuinfo").read_text()
        flags = ", ".join(f for f in ("avx512f", "avx512_bf16", "amx_bf16") if f" {f}" in text)
    except OSError:
        pass
    return (
        f"{cpu_model()}, {os.cpu_count()} cores ({flags or 'no AVX-512'}), "
        f"CPython {platform.python_version()}, TensorFlow {tf_version}"
    )


def synthetic_npz(path: Path, train: int = 60000, test: int = 10000) -> Path:
    """trainer.synthetic's MNIST-format data (real MNIST cannot be downloaded here)."""
    if not path.exists():
        import numpy as np

        sys.path.insert(0, str(ROOT))
        from trainer.synthetic import make_mnist_like

        np.savez(path, **make_mnist_like(train, test, seed=0))
    return path


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


HOOKS = ROOT / "bench" / "hooks"


def trainer_env(extra: dict[str, str] | None = None, phases: Path | None = None) -> dict[str, str]:
    """The environment of a trainer (or `tflaunch local`) the benchmark starts; with `phases`,
    every trainer process records its phases there (bench/hooks/sitecustomize.py)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1")
    if phases is not None:
        env["PYTHONPATH"] = f"{HOOKS}{os.pathsep}{ROOT}"
        env["TFLAUNCH_BENCH_PHASES"] = str(phases)
    env.update(extra or {})
    return env


def read_phases(directory: Path) -> list[dict[str, Any]]:
    """Every event the hooks wrote, in time order."""
    events = [
        json.loads(line)
        for path in directory.glob("*.jsonl")
        for line in path.read_text().splitlines()
        if line
    ]
    return sorted(events, key=lambda e: e["t"])


def run_trainers(
    args: Sequence[str],
    workdir: Path,
    workers: int = 1,
    cpus: Sequence[set[int] | None] | None = None,
    timeout: float = 1800,
    phases: Path | None = None,
) -> dict[str, Any]:
    """`python -m trainer ARGS` as `workers` processes (TF_CONFIG on loopback when > 1),
    worker i pinned to cpus[i] when given, phases recorded into `phases` when given; the
    chief's result.json plus wall seconds."""
    (workdir / "ckpt").mkdir(parents=True, exist_ok=True)
    addresses = [f"127.0.0.1:{p}" for p in free_ports(workers)]
    processes = []
    started = time.monotonic()
    for index in range(workers):
        env = trainer_env({"WORKER_INDEX": str(index)}, phases)
        if workers > 1:
            env["TF_CONFIG"] = json.dumps(
                {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}
            )
        mask = cpus[index] if cpus else None
        log = open(workdir / f"worker-{index}.log", "wb")  # noqa: SIM115
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "trainer",
                    *args,
                    "--model-dir",
                    str(workdir / "model"),
                    "--checkpoint-dir",
                    str(workdir / "ckpt"),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                preexec_fn=(lambda m=mask: os.sched_setaffinity(0, m)) if mask else None,  # type: ignore[misc]
            )
        )
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    codes = [p.wait(timeout=timeout) for p in processes]
    wall = time.monotonic() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if any(codes):
        raise SystemExit(f"trainer failed with {codes}; logs in {workdir}")
    result: dict[str, Any] = json.loads((workdir / "model" / "result.json").read_text())
    result["wall_seconds"] = round(wall, 1)
    # CPU time of the workers (all of it: start-up, training, evaluation, export). Other
    # processes' load moves it far less than wall time; reaped children only, so one group
    # at a time.
    result["cpu_seconds"] = round(
        (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime), 1
    )
    return result


def stats(values: Iterable[float], fmt: str = "{:.0f}") -> str:
    """ "min / median / max" of the values."""
    ordered = sorted(values)
    return " / ".join(fmt.format(v) for v in (ordered[0], statistics.median(ordered), ordered[-1]))


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))
