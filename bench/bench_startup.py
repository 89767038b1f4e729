"""Worker start-up: process start -> first training step, phase by phase.

`tflaunch local --workers 2` on trainer.synthetic's full-size (60k/10k) MNIST-format data,
a short run (--steps-per-epoch 64), with bench/hooks/sitecustomize.py recording each
trainer process's phases. Reports, per phase, min / median / max over both workers of every
repeat, and the load average around the runs.

Run: .venv/bin/python bench/bench_startup.py [--write-docs]   (BENCH=full: more repeats)
     --tree DIR runs the trainer from another checkout (A/B of a start-up change).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    FULL,
    HOOKS,
    ROOT,
    load,
    machine,
    read_phases,
    stats,
    synthetic_npz,
    trainer_env,
)
from bench.docs_section import publish

PHASES = (
    ("wrapper", "python", "worker wrapper's interpreter start"),
    ("wrapper", "peers", "wrapper: TF_CONFIG checks, rendezvous (every peer accepts TCP)"),
    ("trainer", "start", "wrapper starts `python -m trainer`"),
    ("trainer", "python", "trainer's interpreter start"),
    ("trainer", "data", "trainer modules + numpy + read and check the npz"),
    ("trainer", "tensorflow", "import TensorFlow + tf-keras, list devices"),
    ("trainer", "peers", "trainer's own rendezvous (peers already up)"),
    ("trainer", "strategy", "MultiWorkerMirroredStrategy: gRPC server, coordination service"),
    ("trainer", "model", "build and compile the model under the scope"),
    ("trainer", "restored", "datasets, distribute, fit's set-up, checkpoint restore"),
    ("trainer", "first_step", "first execution (32 steps) incl. tracing and graph optimization"),
)


def run_local(data: Path, workdir: Path, phases: Path, tree: Path, extra: Sequence[str]) -> None:
    command = [
        sys.executable, "-m", "launcher", "local", "--workers", "2", "--epochs", "1",
        "--data", str(data), "--workdir", str(workdir), "--steps-per-epoch", "64", "--",
        "--max-test-examples", "512", *extra,
    ]  # fmt: skip
    env = trainer_env(phases=phases)
    env["PYTHONPATH"] = f"{HOOKS}{os.pathsep}{tree}"  # the hooks, then the tree under test
    with open(workdir.with_suffix(".log"), "wb") as log:
        subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)


def durations(events: list[dict]) -> dict[str, list[float]]:
    """Per phase, the seconds since the previous phase, for each worker of each run."""
    by_worker: dict[tuple[int, str], dict[tuple[str, str], float]] = {}
    for event in events:
        key = (event["run"], event["worker"])
        by_worker.setdefault(key, {}).setdefault((event["role"], event["event"]), event["t"])
    result: dict[str, list[float]] = {f"{role} {name}": [] for role, name, _ in PHASES}
    result["total"] = []
    for times in by_worker.values():
        previous = times[("wrapper", "start")]
        for role, name, _ in PHASES:
            result[f"{role} {name}"].append(times[(role, name)] - previous)
            previous = times[(role, name)]
        result["total"].append(times[("trainer", "first_step")] - times[("wrapper", "start")])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5 if FULL else 3)
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--trainer-arg", action="append", default=[])
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()

    loads = []
    with tempfile.TemporaryDirectory(prefix="tflaunch-startup-") as tmp:
        data = synthetic_npz(Path(tmp) / "mnist.npz")
        all_events: list[dict] = []
        for repeat in range(args.repeats):
            before = load()
            phases = Path(tmp) / f"phases-{repeat}"
            run_local(data, Path(tmp) / f"run-{repeat}", phases, args.tree, args.trainer_arg)
            loads.append(f"{before}->{load()}")
            events = [dict(e, run=repeat) for e in read_phases(phases)]
            all_events += events
            total = durations(events)["total"]
            print(f"run {repeat}: start->first step {[round(t, 1) for t in total]} s, "
                  f"load {loads[-1]}", flush=True)  # fmt: skip
    table = durations(all_events)
    lines = [
        f"`tflaunch local --workers 2`, 60,000 synthetic training images, "
        f"{args.repeats} runs x 2 workers; seconds, min / median / max. {machine()}. "
        f"Load average (1/5/15 min) before/after each run: {', '.join(loads)}.",
        "",
        "| phase (ends when) | what | seconds |",
        "| --- | --- | ---: |",
    ]
    for role, name, what in PHASES:
        lines.append(f"| {role} {name} | {what} | {stats(table[f'{role} {name}'], '{:.2f}')} |")
    lines.append(
        f"| **total** | worker process start -> first step | {stats(table['total'], '{:.1f}')} |"
    )
    text = "\n".join(lines)
    publish("startup", "Worker start-up (bench/bench_startup.py)", text, write=args.write_docs)


if __name__ == "__main__":
    main()
