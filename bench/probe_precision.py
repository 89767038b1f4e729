"""Where bfloat16's gain goes: float32 vs mixed_bfloat16, from a bare model to 2 workers.

Three measurements, each alternating float32 and mixed_bfloat16 so load drifts hit both:

1. In one process (bench/speed_inner.py): the trainer's model and input pipeline, no
   strategy, steps_per_execution 32, after a warm-up; with AMX, and with oneDNN held to
   AVX-512 BF16 (`ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16`), i.e. the same CPU without AMX.
2. `python -m trainer` as 1 and as 2 workers (MultiWorkerMirroredStrategy) on real digits:
   images/s of `fit_seconds` (result.json: the first execution's tracing included) and of
   the steady state (`phases.fit`: the first execution's end -> the last one's), the first
   execution's seconds, and test accuracy on every test image.

Run: .venv/bin/python bench/probe_precision.py [--rounds 3] [--markdown OUT.md]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, load, machine, median, run_trainers, stats, trainer_env
from launcher.core import contract

NO_AMX = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}
STEPS_PER_EXECUTION = 32  # the trainer's default: the first execution's steps


def inner(rounds: int, steps: int, env: dict[str, str]) -> dict[str, float]:
    """Median images/s of each variant in one speed_inner.py process."""
    output = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "speed_inner.py"), str(rounds), str(steps),
         "float32", "mixed"],
        env=trainer_env(env), capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    result = json.loads(output.strip().splitlines()[-1])
    return {k: median(result["images"] / w for w in v) for k, v in result["wall"].items()}


def steady(result: dict) -> float:
    """Images/s after the first execution (phases.fit), the steady state of training."""
    steps = result["epochs"] * result["steps_per_epoch"] - STEPS_PER_EXECUTION
    return steps * result["global_batch_size"] / result["phases"]["fit"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    loads = [load()]

    probe: dict[str, list[dict[str, float]]] = {"AMX": [], "no AMX": []}
    for i in range(args.rounds):
        for name in ("AMX", "no AMX") if i % 2 == 0 else ("no AMX", "AMX"):
            probe[name].append(inner(3, 64, {} if name == "AMX" else NO_AMX))
            print(f"probe {name}: {probe[name][-1]}", flush=True)
    loads.append(load())

    runs: dict[tuple[int, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="tflaunch-precision-") as tmp:
        common = ["--data", contract.MNIST_SUBSET_PATH, "--epochs", str(args.epochs),
                  "--global-batch-size", "256", "--expect-gpus", "0"]  # fmt: skip
        for i in range(args.rounds):
            for workers in (1, 2):
                order = ("float32", "mixed") if i % 2 == 0 else ("mixed", "float32")
                for precision in order:
                    workdir = Path(tmp) / f"{i}-{workers}-{precision}"
                    result = run_trainers([*common, "--precision", precision], workdir, workers)
                    runs.setdefault((workers, precision), []).append(result)
                    print(f"{workers} worker(s) {precision}: {result['images_per_sec']} img/s, "
                          f"steady {steady(result):.0f}, acc {result['test_accuracy']}, "
                          f"phases {result['phases']}", flush=True)  # fmt: skip
    loads.append(load())

    lines = [
        f"{machine()}. Load average (1/5/15 min) at the start, between the parts, at the "
        f"end: {', '.join(loads)}.",
        "",
        f"**In one process** (bench/speed_inner.py, {args.rounds} processes per row, each 3 "
        "rounds of 64 steps per variant after a warm-up; images/s, median of rounds):",
        "",
        "| oneDNN may use | float32 | mixed_bfloat16 | bf16 / f32 (median of processes) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, results in probe.items():
        ratios = [r["mixed"] / r["float32"] for r in results]
        lines.append(
            f"| {'AMX (the default)' if name == 'AMX' else 'AVX-512 BF16, no AMX'} | "
            f"{stats(r['float32'] for r in results)} | {stats(r['mixed'] for r in results)} | "
            f"{median(ratios):.2f}x ({stats(ratios, '{:.2f}')}) |"
        )
    lines += [
        "",
        f"**`python -m trainer`** on the shipped subset's real digits ({args.epochs} epochs, "
        f"global batch 256, all 10,000 test images), {args.rounds} runs per row, min / median / "
        "max:",
        "",
        "| workers | precision | images/s of fit_seconds | steady images/s (phases.fit) | "
        "first execution (s) | test accuracy |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for (workers, precision), results in sorted(runs.items()):
        lines.append(
            f"| {workers} | {precision} | {stats(r['images_per_sec'] for r in results)} | "
            f"{stats(steady(r) for r in results)} | "
            f"{stats((r['phases']['first_step'] for r in results), '{:.1f}')} | "
            f"{stats((r['test_accuracy'] for r in results), '{:.4f}')} |"
        )
    lines.append("")
    for workers in (1, 2):
        f32, bf16 = runs[(workers, "float32")], runs[(workers, "mixed")]
        lines.append(
            f"- {workers} worker(s), mixed / float32 medians: fit_seconds images/s "
            f"{median(r['images_per_sec'] for r in bf16) / median(r['images_per_sec'] for r in f32):.2f}x, "
            f"steady {median(steady(r) for r in bf16) / median(steady(r) for r in f32):.2f}x, "
            f"accuracy {100 * (median(r['test_accuracy'] for r in bf16) - median(r['test_accuracy'] for r in f32)):+.2f} points."
        )  # fmt: skip
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
