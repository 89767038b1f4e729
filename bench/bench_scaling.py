"""Scaling: 1 worker on 1 core vs 2 workers on 1 core each, as if on separate nodes.

Each worker is pinned to its own CPU with os.sched_setaffinity and runs `--threads 1`, with
the same per-worker batch in both groups (weak scaling): efficiency = images/s(2 workers) /
(2 x images/s(1 worker with that batch)), computed per interleaved round, median reported.
Levers for the 2-worker group are tried in the same rounds: all-reduce packing
(CommunicationOptions.bytes_per_pack), reduced-precision all-reduce (both through
bench/hooks/sitecustomize.py so the trainer stays unchanged until one wins) and a larger
per-worker batch (more computation per all-reduce of the same 2.8 MB of gradients).

Run: .venv/bin/python bench/bench_scaling.py [--write-docs]   (BENCH=full: more repeats)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    FULL,
    load,
    machine,
    median,
    read_phases,
    run_trainers,
    stats,
    synthetic_npz,
)
from bench.docs_section import publish

STEPS_PER_EXECUTION = 8
"""Small, so that the first execution (tracing included, left out of the CPU figures) is a
small part of a run of every batch size."""
# name -> (workers, per-worker batch, extra environment for the hooks)
VARIANTS: dict[str, tuple[int, int, dict[str, str]]] = {
    "1 worker, 1 core (reference)": (1, 128, {}),
    "2 workers, 1 core each (defaults)": (2, 128, {}),
    "2 workers, bytes_per_pack 256 KiB": (2, 128, {"TFLAUNCH_BENCH_BYTES_PER_PACK": "262144"}),
    "2 workers, float16 all-reduce": (2, 128, {"TFLAUNCH_BENCH_ALLREDUCE_DTYPE": "float16"}),
    "1 worker, batch 512 (reference)": (1, 512, {}),
    "2 workers, batch 512 each": (2, 512, {}),
}


def fit_cpu_per_1000(phases: Path, result: dict) -> float:
    """CPU-seconds of all workers per 1,000 images, from the first execution's end to the
    end of fit (bench/hooks: each event carries its process's CPU time). Unlike images/s this
    hardly moves with other processes' load: it counts work, communication included, not
    waiting."""
    cpu: dict[str, dict[str, float]] = {}
    for event in read_phases(phases):
        if event["role"] == "trainer":
            cpu.setdefault(event["worker"], {})[event["event"]] = event["cpu"]
    spent = sum(c["fit_end"] - c["first_step"] for c in cpu.values())
    first_execution = STEPS_PER_EXECUTION * result["global_batch_size"]
    images = result["epochs"] * result["steps_per_epoch"] * result["global_batch_size"]
    return 1000 * spent / (images - first_execution)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5 if FULL else 3)
    parser.add_argument("--train-examples", type=int, default=60000 if FULL else 10240)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--only", action="append", help="run only variants containing this")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("needs 2 CPUs to pin 2 workers apart")
    chosen = {
        name: v
        for i, (name, v) in enumerate(VARIANTS.items())
        if i < 2 or not args.only or any(o in name for o in args.only)
    }
    batches = {batch for _, batch, _ in chosen.values()}
    # Every 2-worker variant with its 1-worker reference of the same batch.
    variants = {
        name: v for name, v in VARIANTS.items() if name in chosen or (v[0] == 1 and v[1] in batches)
    }

    results: dict[str, list[dict]] = {name: [] for name in variants}
    loads: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tflaunch-scaling-") as tmp:
        data = synthetic_npz(Path(tmp) / "mnist.npz")
        for repeat in range(args.repeats):
            for i, (name, (workers, batch, env)) in enumerate(variants.items()):
                before = load()
                os.environ.update(env)
                try:
                    result = run_trainers(
                        ["--data", str(data), "--epochs", str(args.epochs), "--threads", "1",
                         "--max-train-examples", str(args.train_examples * batch // 128),
                         "--max-test-examples", "2048", "--expect-gpus", "0",
                         "--steps-per-execution", str(STEPS_PER_EXECUTION),
                         "--global-batch-size", str(batch * workers)],
                        Path(tmp) / f"r{repeat}-v{i}",
                        workers=workers,
                        cpus=[{cpus[w]} for w in range(workers)],
                        phases=Path(tmp) / f"phases-r{repeat}-v{i}",
                    )  # fmt: skip
                finally:
                    for key in env:
                        os.environ.pop(key)
                result["cpu_per_1000"] = fit_cpu_per_1000(
                    Path(tmp) / f"phases-r{repeat}-v{i}", result
                )
                results[name].append(result)
                loads.append(f"{before}->{load()}")
                print(f"{repeat} {name}: {result['images_per_sec']} img/s, "
                      f"acc {result['test_accuracy']:.4f}, load {loads[-1]}", flush=True)  # fmt: skip

    names = list(variants)
    references = {b: n for n, (w, b, _) in variants.items() if w == 1}
    lines = [
        f"Workers pinned to one CPU each (`os.sched_setaffinity`), `--threads 1`, "
        f"128 images per worker per step unless named, {args.train_examples:,} synthetic "
        f"training images x {args.epochs} epochs (4x as many at batch 512: the same steps), "
        f"steps_per_execution {STEPS_PER_EXECUTION}, {args.repeats} interleaved rounds. "
        f"{machine()}. Load average (1/5/15 min): {loads[0]} at the start, {loads[-1]} at "
        "the end; the other CPU load lands on the pinned cores too, so efficiency here is a "
        "lower bound of what separate nodes give. CPU efficiency = CPU per image of 1 worker / "
        "CPU per image of the group: the share of the group's CPU that is the 1-worker work "
        "(the rest is communication and synchronization), which waiting for a straggler does "
        "not change.",
        "",
        "| variant | images/s min / median / max | efficiency (median of rounds) | "
        "CPU-s per 1,000 images in fit (median) | CPU efficiency | test accuracy |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in names:
        ips = [r["images_per_sec"] for r in results[name]]
        workers, batch, _ = variants[name]
        reference = [r["images_per_sec"] for r in results[references[batch]]]
        reference_cpu = median(r["cpu_per_1000"] for r in results[references[batch]])
        efficiency = (
            "-"
            if workers == 1
            else f"{statistics.median(i / (2 * r) for i, r in zip(ips, reference, strict=True)):.0%}"
        )
        acc = median(r["test_accuracy"] for r in results[name])
        cpu = median(r["cpu_per_1000"] for r in results[name])
        lines.append(
            f"| {name} | {stats(ips)} | {efficiency} | {cpu:.3f} | {reference_cpu / cpu:.0%} | "
            f"{acc:.4f} |"
        )
    table = "\n".join(lines)
    heading = "Scaling, 1 -> 2 workers (bench/bench_scaling.py)"
    publish("scaling", heading, table, write=args.write_docs)


if __name__ == "__main__":
    main()
