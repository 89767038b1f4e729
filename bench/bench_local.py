"""Side by side on this machine: `tflaunch local --workers 2` vs the example it grew from.

All run as 2 MultiWorkerMirroredStrategy workers on loopback (one process each: tflaunch's
own runner for the trainer, this script's for the example, bench/baseline_mnist.py), on the
same real digits (the MNIST subset shipped with tflaunch unless --data: its first
--train-examples training images and all its test images), for the same epochs, with the
same model and Adam. tflaunch trains with global batch 256; the example as the tutorial
writes it (64 images per worker) and at the same global batch (128 per worker). The three
alternate, their order rotating each repeat, so load drifts hit them alike.

Usage: python bench/bench_local.py [--epochs 3] [--train-examples 8000] [--data mnist.npz]
       [--repeats 3] [--trainer-arg=--threads=auto ...] [--markdown OUT.md] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import free_ports, load, machine, stats  # noqa: E402
from launcher.core import contract  # noqa: E402

BASELINE_PREFIX = "BASELINE_RESULT "


def run_group(command: Sequence[str], workers: int, prefix: str, workdir: Path) -> dict:
    """Start `workers` processes with TF_CONFIG; return worker 0's result line, parsed."""
    addresses = [f"127.0.0.1:{port}" for port in free_ports(workers)]
    processes = []
    for index in range(workers):
        env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
        env[contract.ENV_TF_CONFIG] = json.dumps(
            {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}
        )
        log = open(workdir / f"{Path(command[-1]).stem}-{index}.log", "wb")  # noqa: SIM115
        processes.append(
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=log, cwd=workdir)
        )
    started = time.monotonic()
    outputs = [p.communicate()[0].decode() for p in processes]
    wall = time.monotonic() - started
    if any(p.returncode for p in processes):
        raise SystemExit(f"{command} failed; logs in {workdir}")
    line = next(line for line in outputs[0].splitlines() if line.startswith(prefix))
    result: dict = json.loads(line[len(prefix) :])
    result["wall_seconds"] = round(wall, 1)
    return result


def run_tflaunch_local(
    data: Path, epochs: int, examples: int, workdir: Path, extra: Sequence[str]
) -> dict:
    """`tflaunch local --workers 2`, exactly as a user runs it; the chief's result.json."""
    run_dir = Path(tempfile.mkdtemp(prefix="local-", dir=workdir))
    command = [
        sys.executable, "-m", "launcher", "local", "--workers", "2", "--epochs", str(epochs),
        "--global-batch-size", "256", "--data", str(data), "--workdir", str(run_dir),
        "--", "--max-train-examples", str(examples), *extra,
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    started = time.monotonic()
    with open(run_dir / "tflaunch-local.log", "wb") as log:
        code = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - started
    if code:
        raise SystemExit(f"tflaunch local failed ({code}); log in {run_dir}")
    result: dict = json.loads((run_dir / "model" / contract.RESULT_FILE).read_text())
    result["wall_seconds"] = round(wall, 1)
    return result


def baseline_command(data: Path, epochs: int, examples: int, per_worker: int) -> list[str]:
    return [sys.executable, str(REPO / "bench" / "baseline_mnist.py"), "--data", str(data),
            "--epochs", str(epochs), "--train-examples", str(examples),
            "--per-worker-batch", str(per_worker)]  # fmt: skip


VARIANTS = {
    "example, 64 per worker (as the tutorial)": 64,
    "example, 128 per worker (global 256)": 128,
    "`tflaunch local --workers 2`": None,
}
TFLAUNCH = "`tflaunch local --workers 2`"


def median_of(results: list[dict], key: str) -> float:
    return statistics.median(float(r[key]) for r in results)


def markdown(results: dict[str, list[dict]], args: argparse.Namespace, loads: list[float]) -> str:
    ours = results[TFLAUNCH]
    lines = [
        f"2 workers on loopback, {args.epochs} epochs, {args.train_examples:,} real training "
        f"images ({args.data or 'the shipped MNIST subset'}), accuracy on all its test images; "
        f"{len(ours)} run(s) per variant, alternating; trainer flags: "
        f"`{' '.join(args.trainer_arg) or '(defaults)'}`. {machine()}. 1-min load average "
        f"before the runs: {stats(loads, '{:.1f}')} (min / median / max).",
        "",
        "| variant | global batch | images/s of fit, min / median / max | tflaunch's median "
        "over it | fit seconds (median) | wall seconds (median) | test accuracy (median) | "
        "tflaunch minus it (points) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, runs in results.items():
        ratio = median_of(ours, "images_per_sec") / median_of(runs, "images_per_sec")
        points = 100 * (median_of(ours, "test_accuracy") - median_of(runs, "test_accuracy"))
        lines.append(
            f"| {name} | {runs[0]['global_batch_size']} | "
            f"{stats(r['images_per_sec'] for r in runs)} | {ratio:.2f}x | "
            f"{median_of(runs, 'fit_seconds'):.1f} | {median_of(runs, 'wall_seconds'):.1f} | "
            f"{median_of(runs, 'test_accuracy'):.4f} | {points:+.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-examples", type=int, default=8000)
    parser.add_argument("--data", type=Path, help="default: the shipped MNIST subset")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--trainer-arg",
        action="append",
        default=[],
        help="extra flag for python -m trainer (repeatable)",
    )
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument(
        "--write-docs", action="store_true", help="update its section of docs/performance.md"
    )
    args = parser.parse_args()
    data = args.data or Path(contract.MNIST_SUBSET_PATH)

    results: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tflaunch-bench-") as tmp:
        workdir = Path(tmp)
        names = list(VARIANTS)
        for repeat in range(args.repeats):
            for name in names[repeat % 3 :] + names[: repeat % 3]:  # rotate: none always first
                loads.append(os.getloadavg()[0])
                per_worker = VARIANTS[name]
                if per_worker is None:
                    run = run_tflaunch_local(
                        data, args.epochs, args.train_examples, workdir, args.trainer_arg
                    )
                else:
                    command = baseline_command(data, args.epochs, args.train_examples, per_worker)
                    run = run_group(command, 2, BASELINE_PREFIX, workdir)
                results[name].append(run)
                shown = {k: v for k, v in run.items() if k not in ("history", "phases")}
                print(f"{repeat + 1} {name}: {shown}; load before {loads[-1]:.1f}", flush=True)
    print(f"load average at the end: {load()}")
    table = markdown(results, args, loads)
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n")
    if args.write_docs:
        from bench.docs_section import write_section

        write_section("trainer", f"### Latest run (bench/bench_local.py)\n\n{table}\n")


if __name__ == "__main__":
    main()
