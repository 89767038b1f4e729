"""Time to result: command -> exit of the README demo and of `--script`, REF's code vs HEAD's.

Two commands, each exactly as a user types it (run in the exported tree, with this venv's
interpreter and packages through PYTHONPATH, so only tflaunch's own code differs):

* demo: `tflaunch local --workers 2` (what `make run-local` runs): the built-in trainer on
  the data tflaunch finds (here: the shipped MNIST subset), 3 epochs.
* script: `tflaunch local --script examples/custom/keras_mnist.py --workers 2`: a small
  program of the user's, run through the worker wrapper.
* one-worker: `tflaunch local --workers 1`: the demo's training (same data, epochs, global
  batch and weights) in one worker, with no second import or tracing and no all-reduce:
  how far below the demo the same work can go on this machine without a multi-worker cost.

REF and HEAD alternate (REF HEAD HEAD REF ...) so load drifts on this shared machine hit
both alike; each run records the 1-minute load average before it. Printed per command and
side: wall seconds min / median / max, the ratio HEAD / REF of the medians, and for the demo
the chief's phases (result.json) and its test accuracy.

Usage: .venv/bin/python bench/compare_ttr.py --ref main [--runs 4] [--only demo|script|one-worker]
       [--markdown OUT.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import load, machine, median  # noqa: E402
from bench.compare import export_tree, spread  # noqa: E402

COMMANDS = {
    "demo": ["local", "--workers", "2"],
    "script": ["local", "--script", "examples/custom/keras_mnist.py", "--workers", "2"],
    "one-worker": ["local", "--workers", "1"],
}
PHASES = ("import", "strategy", "setup", "first_step", "fit", "evaluate", "export", "total")


def run_once(tree: Path, command: str, workdir: Path) -> dict:
    """One `tflaunch ...` run of the code in `tree`: wall seconds, load, result.json's parts."""
    argv = [sys.executable, "-m", "launcher", *COMMANDS[command], "--workdir", str(workdir)]
    env = {k: v for k, v in os.environ.items() if k != "TFLAUNCH_DATA"}
    env.update(PYTHONPATH=str(tree), NO_COLOR="1")
    before = os.getloadavg()[0]
    started = time.monotonic()
    run = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if run.returncode:
        raise SystemExit(f"{tree.name} {command}: exited {run.returncode}:\n{run.stdout[-3000:]}")
    result: dict = {}
    result_file = workdir / "model" / "result.json"
    if result_file.exists():
        result = json.loads(result_file.read_text())
    return {
        "wall": wall,
        "load": before,
        "accuracy": result.get("test_accuracy"),
        "phases": result.get("phases") or {},
    }


def table(command: str, sides: dict[str, list[dict]], names: dict[str, str]) -> list[str]:
    ref, head = sides["ref"], sides["head"]

    def row(label: str, old: list[float], new: list[float], fmt: str = "{:.1f}") -> str:
        ratio = f"{median(new) / median(old):.2f}x" if old and new and median(old) else "-"
        return f"| {label} | {spread(old, fmt)} | {spread(new, fmt)} | {ratio} |"

    lines = [
        f"`tflaunch {' '.join(COMMANDS[command])}`, {len(ref)} runs per side alternating. "
        "Min / median / max; ratio = HEAD's median / REF's.",
        "",
        f"| | REF {names['ref']} | HEAD {names['head']} | ratio |",
        "| --- | ---: | ---: | ---: |",
        row(
            "**wall seconds, command -> exit**", [r["wall"] for r in ref], [r["wall"] for r in head]
        ),
    ]
    for phase in PHASES:
        old = [r["phases"][phase] for r in ref if phase in r["phases"]]
        new = [r["phases"][phase] for r in head if phase in r["phases"]]
        if old or new:
            lines.append(row(f"chief's `{phase}` (s)", old, new))
    accuracy = ([r["accuracy"] for r in ref if r["accuracy"] is not None],
                [r["accuracy"] for r in head if r["accuracy"] is not None])  # fmt: skip
    if accuracy[0] or accuracy[1]:
        lines.append(row("test accuracy", *accuracy, fmt="{:.4f}"))
    lines.append(row("1-min load average before each run", [r["load"] for r in ref],
                     [r["load"] for r in head]))  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", required=True, help="the git ref to compare HEAD against")
    parser.add_argument("--head", default="HEAD")
    parser.add_argument("--runs", type=int, default=4, help="runs per side and command")
    parser.add_argument("--only", choices=sorted(COMMANDS), action="append")
    parser.add_argument("--markdown", type=Path, help="also write the tables here")
    args = parser.parse_args()
    commands = args.only or ["demo", "script"]

    with tempfile.TemporaryDirectory(prefix="tflaunch-ttr-") as tmp:
        base = Path(tmp)
        trees = {"ref": base / "ref", "head": base / "head"}
        names = {side: export_tree(getattr(args, side), trees[side]) for side in trees}
        results = {c: {"ref": [], "head": []} for c in commands}  # type: ignore[var-annotated]
        for i in range(args.runs):
            for command in commands:
                for side in ("ref", "head") if i % 2 == 0 else ("head", "ref"):  # ABBA
                    run = run_once(trees[side], command, base / f"{command}-{side}-{i}")
                    results[command][side].append(run)
                    print(f"{command} {side} {i + 1}: {json.dumps(run)}", flush=True)
        end_load = load()
    lines = [f"{machine()}; load average at the end: {end_load}.", ""]
    for command in commands:
        lines += [*table(command, results[command], names), ""]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
