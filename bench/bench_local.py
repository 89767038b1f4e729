"""Side by side on this machine: `tflaunch local --workers 2` vs the textbook baseline.

Both run as 2 MultiWorkerMirroredStrategy workers on loopback (one process each: tflaunch's
own runner for the trainer, this script's for the baseline), on the same data, for the same
epochs, with the same model, Adam and global batch 256. Real MNIST cannot be downloaded here, so unless --data is given the
script generates a full-size (60k/10k) MNIST-like npz with `trainer.synthetic`.

Usage: python bench/bench_local.py [--epochs 3] [--data mnist.npz] [--repeats 1]
       [--trainer-arg=--threads=auto ...] [--markdown OUT.md] [--write-docs]
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

from bench.common import free_ports  # noqa: E402
from launcher.core import contract  # noqa: E402
from trainer.synthetic import make_mnist_like  # noqa: E402

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


def run_tflaunch_local(data: Path, epochs: int, workdir: Path, extra: Sequence[str]) -> dict:
    """`tflaunch local --workers 2`, exactly as a user runs it; the chief's result.json."""
    run_dir = Path(tempfile.mkdtemp(prefix="local-", dir=workdir))
    command = [
        sys.executable, "-m", "launcher", "local", "--workers", "2", "--epochs", str(epochs),
        "--global-batch-size", "256", "--data", str(data), "--workdir", str(run_dir),
        "--", *extra,
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


def baseline_command(data: Path, epochs: int) -> list[str]:
    return [sys.executable, str(REPO / "bench" / "baseline_mnist.py"), "--data", str(data),
            "--epochs", str(epochs)]  # fmt: skip


def median_of(results: list[dict], key: str) -> float:
    return statistics.median(float(r[key]) for r in results)


def markdown(
    trainer: list[dict], baseline: list[dict], epochs: int, extra: Sequence[str], synthetic: bool
) -> str:
    rows = [
        ("images/s (fit)", "images_per_sec", "{:.0f}"),
        ("fit seconds", "fit_seconds", "{:.1f}"),
        ("test accuracy", "test_accuracy", "{:.4f}"),
        ("wall seconds (start to exit)", "wall_seconds", "{:.1f}"),
    ]
    lines = [
        f"2 workers on loopback, {epochs} epochs, global batch 256, "
        f"{'synthetic 60k/10k MNIST-like data' if synthetic else 'given data'}, "
        f"median of {len(trainer)} run(s); trainer flags: `{' '.join(extra) or '(defaults)'}`",
        "",
        "| | baseline | `tflaunch local --workers 2` | ratio |",
        "| --- | --- | --- | --- |",
    ]
    for label, key, fmt in rows:
        b, t = median_of(baseline, key), median_of(trainer, key)
        lines.append(f"| {label} | {fmt.format(b)} | {fmt.format(t)} | {t / b:.2f}x |")
    per_run = ", ".join(
        f"{b['images_per_sec']:.0f} vs {t['images_per_sec']:.0f}"
        for b, t in zip(baseline, trainer, strict=False)
    )
    lines.append(f"\nEach interleaved run, images/s baseline vs tflaunch: {per_run}.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--data", type=Path)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--trainer-arg",
        action="append",
        default=[],
        help="extra flag for python -m trainer (repeatable)",
    )
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument(
        "--write-docs", action="store_true", help="update its section of docs/performance.md"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tflaunch-bench-") as tmp:
        workdir = Path(tmp)
        data = args.data
        if data is None:
            import numpy as np

            data = workdir / "mnist.npz"
            np.savez(data, **make_mnist_like(60000, 10000, seed=0))
        trainer: list[dict] = []
        baseline: list[dict] = []
        for repeat in range(args.repeats):  # interleaved, so load drifts hit both alike
            if not args.skip_baseline:
                baseline.append(
                    run_group(baseline_command(data, args.epochs), 2, BASELINE_PREFIX, workdir)
                )
                print(f"baseline run {repeat + 1}: {baseline[-1]}", flush=True)
            trainer.append(run_tflaunch_local(data, args.epochs, workdir, args.trainer_arg))
            print(
                f"trainer run {repeat + 1}: "
                f"{ {k: v for k, v in trainer[-1].items() if k != 'history'} }",
                flush=True,
            )
        if baseline:
            table = markdown(trainer, baseline, args.epochs, args.trainer_arg, args.data is None)
            print(table)
            if args.markdown:
                args.markdown.write_text(table + "\n")
            if args.write_docs:
                from bench.docs_section import write_section

                write_section("trainer", f"### Latest run (bench/bench_local.py)\n\n{table}\n")


if __name__ == "__main__":
    main()
