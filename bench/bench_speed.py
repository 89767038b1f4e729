"""Per-worker speed: float32 vs mixed precision (bfloat16) vs XLA, side by side.

Two measurements, because this machine is shared and whole runs minutes apart land in
different load regimes:

1. Speed, in one process (bench/speed_inner.py): the trainer's model and input pipeline in
   each variant, trained in alternation, a few seconds each, several rounds. Reported:
   images/s (wall) and CPU-seconds per 1,000 images of this process (other processes' load
   barely moves the latter), median over rounds, and the ratio to float32.
2. Accuracy, end to end: `python -m trainer` as one worker with `--precision` / `--jit-compile`
   on trainer.synthetic's MNIST-format data, float32 and mixed alternately; test accuracy
   and the images/s of fit.

Run: .venv/bin/python bench/bench_speed.py [--write-docs]   (BENCH=full: more of both)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    FULL,
    ROOT,
    load,
    machine,
    median,
    run_trainers,
    stats,
    synthetic_npz,
    trainer_env,
)
from bench.docs_section import publish

INNER = {
    "float32": "float32 (`--precision float32`; `auto` on CPUs without AMX)",
    "mixed": "mixed_bfloat16 (`--precision mixed`; `auto` on CPUs with AMX)",
    "xla": "float32 + XLA (`--jit-compile`)",
}
END_TO_END = {
    "float32 (`--precision float32`)": ["--precision", "float32"],
    "mixed_bfloat16 (`--precision mixed`)": ["--precision", "mixed"],
}
if FULL:
    END_TO_END["float32 + XLA (`--jit-compile`)"] = ["--precision", "float32", "--jit-compile"]


def inner(rounds: int, steps: int) -> dict:
    before = load()
    output = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "speed_inner.py"), str(rounds), str(steps), *INNER],
        env=trainer_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result: dict = json.loads(output.strip().splitlines()[-1])
    result["load"] = f"{before}->{load()}"
    return result


def inner_table(speed: dict, rounds: int, steps: int) -> list[str]:
    images = speed["images"]
    wall0 = median(images / w for w in speed["wall"]["float32"])
    cpu0 = median(1000 * c / images for c in speed["cpu"]["float32"])
    lines = [
        f"**Speed** (bench/speed_inner.py): one process, the trainer's model and pipeline, "
        f"batch 256, {rounds} rounds of {steps} steps per variant in alternation after a "
        f"warm-up round; load average (1/5/15 min) {speed['load']}.",
        "",
        "| variant | images/s (wall) min / median / max | vs float32 | CPU-s per 1,000 images "
        "(median) | vs float32 |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for key, label in INNER.items():
        ips = [images / w for w in speed["wall"][key]]
        cpu = median(1000 * c / images for c in speed["cpu"][key])
        lines.append(
            f"| {label} | {stats(ips)} | {median(ips) / wall0:.2f}x | {cpu:.3f} | "
            f"{cpu / cpu0:.2f}x |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10 if FULL else 5)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3 if FULL else 1)
    parser.add_argument("--train-examples", type=int, default=60000 if FULL else 20480)
    parser.add_argument("--epochs", type=int, default=3 if FULL else 2)
    parser.add_argument("--skip-inner", action="store_true", help="end-to-end runs only")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()

    speed = {} if args.skip_inner else inner(args.rounds, args.steps)
    print(json.dumps(speed), flush=True)

    results: dict[str, list[dict]] = {name: [] for name in END_TO_END}
    loads: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tflaunch-speed-") as tmp:
        data = synthetic_npz(Path(tmp) / "mnist.npz")
        common = ["--data", str(data), "--epochs", str(args.epochs), "--expect-gpus", "0",
                  "--max-train-examples", str(args.train_examples), "--global-batch-size", "256"]  # fmt: skip
        for repeat in range(args.repeats):
            order = list(enumerate(END_TO_END.items()))
            for i, (name, flags) in order if repeat % 2 == 0 else order[::-1]:  # A B, B A, ...
                before = load()
                result = run_trainers([*common, *flags], Path(tmp) / f"r{repeat}-v{i}")
                results[name].append(result)
                loads.append(f"{before}->{load()}")
                print(f"{repeat} {name}: {result['images_per_sec']} img/s, "
                      f"acc {result['test_accuracy']:.4f}, load {loads[-1]}", flush=True)  # fmt: skip

    lines = [f"{machine()}.", ""]
    if speed:
        lines += inner_table(speed, args.rounds, args.steps)
    first = next(iter(END_TO_END))
    base_acc = median(r["test_accuracy"] for r in results[first])
    lines += [
        "",
        f"**End to end** (accuracy, and CPU time as a load-robust speed figure): `python -m trainer`, one worker, {args.train_examples:,} "
        f"synthetic training images x {args.epochs} epochs, 10,000 test images, "
        f"{args.repeats} round(s); load {loads[0]} first, {loads[-1]} last.",
        "",
        "| variant | test accuracy (median) | vs float32 (points) | images/s of fit, min / "
        "median / max | CPU-seconds of the whole run (median) | vs float32 |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    base_cpu = median(r["cpu_seconds"] for r in results[first])
    for name, runs in results.items():
        acc = median(r["test_accuracy"] for r in runs)
        cpu = median(r["cpu_seconds"] for r in runs)
        lines.append(
            f"| {name} | {acc:.4f} | {100 * (acc - base_acc):+.2f} | "
            f"{stats(r['images_per_sec'] for r in runs)} | {cpu:.0f} | {cpu / base_cpu:.2f}x |"
        )
    table = "\n".join(lines)
    publish("speed", "Per-worker speed (bench/bench_speed.py)", table, write=args.write_docs)


if __name__ == "__main__":
    main()
