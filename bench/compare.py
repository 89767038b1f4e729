"""`make bench-compare REF=<git ref>`: the training speed of REF's code against HEAD's, in one run.

Both trees are exported with `git archive` into a temporary directory (a throwaway work tree
with no git metadata) and run with this venv's interpreter and packages through
PYTHONPATH, so only tflaunch's own code differs. The workload is issue 26's: `tflaunch
local examples/mnist.yaml --workers 2 --epochs 3 --global-batch-size 256` on 8,000 digits
of the MNIST subset shipped with tflaunch (`-- --max-train-examples 8000`). REF and HEAD run
alternately (REF HEAD HEAD REF REF HEAD ...), so load drifts on this shared machine hit both
sides alike; each run records the 1-minute load average before it.

Printed per side: result.json's `fit_seconds` and `images_per_sec`, the wall time of the
command, and the seconds between the chief's "epoch E/E" and "evaluated" log lines (the
end-of-fit stall of issue 26 lands there; 1 s resolution, export included), as
min / median / max; and the ratio HEAD / REF of the medians. Where the trainer writes
`phases` (trainer/phases.py), the largest `fit_end` of any worker (from their logs: the
chief's result.json has only its own), and how many runs exceeded --stall-bound in it: the
bound of the stall guard, checked here, never in tests.

Usage: .venv/bin/python bench/compare.py --ref e582a42 [--runs 4] [--markdown OUT.md]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import load, machine, median  # noqa: E402

SUBSET = ROOT / "launcher" / "core" / "data" / "mnist-subset.npz"
LOG_LINE = re.compile(
    r"(\d\d):(\d\d):(\d\d)(?:[.,]\d+)? \[worker 0/\d+\] INFO (epoch (\d+)/(\d+):|evaluated in)"
)
"""The chief's epoch and "evaluated" lines, in the trainer's log format at any ref."""
FIT_END = re.compile(r"\[worker \d+/\d+\] INFO phases: .*?fit_end ([0-9.]+)s")
"""Each worker's phases line (trainer/phases.py): a stall on a non-chief shows only there."""


def export_tree(ref: str, into: Path) -> str:
    """`git archive REF` unpacked into `into`; returns the commit's short hash."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", f"{ref}^{{commit}}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    into.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait():
        raise SystemExit(f"git archive {ref} failed")
    return commit


def end_of_fit_gap(text: str) -> float | None:
    """Seconds from the chief's last-epoch line to its "evaluated" line (None: not found)."""
    last_epoch = evaluated = None
    for match in LOG_LINE.finditer(text):
        seconds = int(match[1]) * 3600 + int(match[2]) * 60 + int(match[3])
        if match[5] is not None and match[5] == match[6]:
            last_epoch = seconds
        elif match[5] is None:
            evaluated = seconds
    if last_epoch is None or evaluated is None:
        return None
    return float((evaluated - last_epoch) % 86400)


def run_once(tree: Path, data: Path, workdir: Path, args: argparse.Namespace) -> dict:
    """One `tflaunch local` run of the code in `tree`; result.json plus wall time and load."""
    command = [
        sys.executable, "-m", "launcher", "local", "examples/mnist.yaml",
        "--workers", str(args.workers), "--epochs", str(args.epochs),
        "--global-batch-size", str(args.global_batch_size), "--data", str(data),
        "--workdir", str(workdir), "--", "--max-train-examples", str(args.train_examples),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(tree), TF_CPP_MIN_LOG_LEVEL="2")
    before = os.getloadavg()[0]
    started = time.monotonic()
    run = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if run.returncode:
        raise SystemExit(
            f"{tree.name}: tflaunch local exited {run.returncode}:\n{run.stdout[-3000:]}"
        )
    result: dict = json.loads((workdir / "model" / "result.json").read_text())
    logs = run.stdout + "".join(p.read_text(errors="replace") for p in workdir.rglob("*.log"))
    return {
        "fit_seconds": float(result["fit_seconds"]),
        "images_per_sec": float(result["images_per_sec"]),
        "test_accuracy": float(result["test_accuracy"]),
        "wall_seconds": wall,
        "gap": end_of_fit_gap(logs),
        "fit_end": max((float(m[1]) for m in FIT_END.finditer(logs)), default=None),
        "load": before,
        "phases": result.get("phases"),
    }


def spread(values: Iterable[float | None], fmt: str = "{:.2f}") -> str:
    numbers = sorted(v for v in values if v is not None)
    if not numbers:
        return "-"
    return " / ".join(fmt.format(v) for v in (numbers[0], median(numbers), numbers[-1]))


def table(sides: dict[str, list[dict]], ref: str, head: str, args: argparse.Namespace) -> str:
    rows = [
        ("fit_seconds (result.json)", "fit_seconds", "{:.2f}"),
        ("images/s (result.json)", "images_per_sec", "{:.0f}"),
        ("wall seconds of `tflaunch local`", "wall_seconds", "{:.1f}"),
        ("last epoch line -> evaluated (s, export included)", "gap", "{:.0f}"),
        ("fit_end, the slowest worker's (s)", "fit_end", "{:.1f}"),
        ("test accuracy", "test_accuracy", "{:.4f}"),
        ("1-min load average before each run", "load", "{:.1f}"),
    ]
    lines = [
        f"`tflaunch local examples/mnist.yaml --workers {args.workers} --epochs {args.epochs} "
        f"--global-batch-size {args.global_batch_size}` on {args.train_examples:,} digits of "
        f"the shipped MNIST subset, {args.runs} runs per side alternating; {machine()}. "
        "Min / median / max; ratio = HEAD's median / REF's.",
        "",
        f"| | REF {ref} | HEAD {head} | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    for label, key, fmt in rows:
        old = [r[key] for r in sides["ref"] if r[key] is not None]
        new = [r[key] for r in sides["head"] if r[key] is not None]
        ratio = f"{median(new) / median(old):.2f}x" if old and new and median(old) else "-"
        lines.append(f"| {label} | {spread(old, fmt)} | {spread(new, fmt)} | {ratio} |")
    for side, name in (("ref", f"REF {ref}"), ("head", f"HEAD {head}")):
        ends = [r["fit_end"] for r in sides[side] if r["fit_end"] is not None]
        if ends:
            over = sum(1 for e in ends if e > args.stall_bound)
            lines.append(
                f"\n{name}: fit_end over {args.stall_bound:g} s in {over} of {len(ends)} runs."
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", required=True, help="the git ref to compare HEAD against")
    parser.add_argument("--head", default="HEAD", help="the other side (default: HEAD)")
    parser.add_argument("--runs", type=int, default=4, help="runs per side (default: 4)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--global-batch-size", type=int, default=256)
    parser.add_argument("--train-examples", type=int, default=8000)
    parser.add_argument(
        "--stall-bound", type=float, default=3.0, help="phases.fit_end above it is a stall"
    )
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tflaunch-compare-") as tmp:
        base = Path(tmp)
        trees = {"ref": base / "ref", "head": base / "head"}
        ref = export_tree(args.ref, trees["ref"])
        head = export_tree(args.head, trees["head"])
        data = Path(shutil.copy(SUBSET, base / "mnist-subset.npz"))
        sides: dict[str, list[dict]] = {"ref": [], "head": []}
        for i in range(args.runs):
            order = ("ref", "head") if i % 2 == 0 else ("head", "ref")  # ABBA: no side first
            for side in order:
                run = run_once(trees[side], data, base / f"{side}-{i}", args)
                sides[side].append(run)
                print(f"{side} {i + 1}: {json.dumps(run)}", flush=True)
        print(f"load average at the end: {load()}")
    text = table(sides, ref, head, args)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
