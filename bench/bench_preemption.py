"""Preemption: steps lost and time from the signal to training again, SIGTERM vs SIGKILL.

`tflaunch local --workers 2 --verbose` on generated MNIST-shaped data (backups at epoch
ends, the default); once the first epoch's backup exists and the second epoch has run for
--delay seconds, worker 1 gets SIGTERM (it saves with every worker, exit 79, the group
resumes without a retry) or SIGKILL (the group restarts from the epoch's backup). Side by
side, same machine, same moment.

* steps lost: steps trained before the signal that the restarted group trains again =
  (the last step reached before the signal) - (the step it resumes at). For SIGTERM the
  last step is the saved one; for SIGKILL the chief's last progress line before the kill
  (a lower bound: progress lines come every 2 s).
* to training again: from the signal to the restarted chief's first progress line (its
  first finished execution after the resume).
* save: SIGTERM to "saved" line on the victim (notice + the agreed step + the save).

Run: .venv/bin/python bench/bench_preemption.py [--runs N] [--delay 3] [--write-docs]
(BENCH=full: 3 runs of each, else 1)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.docs_section import write_section
from launcher.core import contract, progress
from trainer.synthetic import make_mnist_like

RESUMED = re.compile(r"resuming from the backup in \S+ at step (\d+)")


@dataclasses.dataclass
class Outcome:
    signal: str
    steps_lost: int
    to_training_again: float
    to_saved: float | None


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def run_once(data: Path, sig: signal.Signals, delay: float) -> Outcome:
    workdir = Path(tempfile.mkdtemp(prefix="bench-preempt-"))
    argv = [sys.executable, "-m", "launcher", "local", "--workers", "2", "--epochs", "6",
            "--global-batch-size", "64", "--data", str(data), "--workdir", str(workdir),
            "--verbose", "--", "--steps-per-execution", "4"]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    launcher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)  # fmt: skip
    assert launcher.stdout is not None
    sent = saved_at = backup_seen = None
    back = float("nan")  # stays NaN if training ended before the signal landed
    last_step = saved_step = resumed_step = 0
    backups = workdir / "checkpoints" / "chief"
    try:
        for line in launcher.stdout:
            now = time.monotonic()
            found = progress.parse_line(line)
            if found is not None and sent is None:
                last_step = (found.epoch - 1) * found.steps + found.step
            if backup_seen is None and backups.exists() and any(backups.glob("*.index")):
                backup_seen = now
            if sent is None and backup_seen is not None and now - backup_seen >= delay:
                os.kill(_children(launcher.pid)[1], sig)
                sent = time.monotonic()
                continue
            match = contract.PREEMPTED_SAVED.search(line)
            if match and saved_at is None:
                saved_at, saved_step = now, int(match.group("step"))
            match = RESUMED.search(line)
            if match and sent is not None:
                resumed_step = int(match.group(1))
            if found is not None and sent is not None and resumed_step:
                back = now - sent
                launcher.send_signal(signal.SIGINT)
                break
        launcher.wait(timeout=120)
    finally:
        launcher.kill()
    before = saved_step if sig == signal.SIGTERM else max(last_step, resumed_step)
    return Outcome(
        sig.name, before - resumed_step, back, None if saved_at is None else saved_at - sent
    )


def lost(outcome: Outcome) -> str:
    """SIGKILL's figure is a lower bound (the last progress line before the kill)."""
    return str(outcome.steps_lost) if outcome.signal == "SIGTERM" else f">= {outcome.steps_lost}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3 if os.environ.get("BENCH") == "full" else 1)
    parser.add_argument("--delay", type=float, default=2.0)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp()) / "mnist.npz"
    np.savez(data, **make_mnist_like(train=6400, test=512, seed=0))
    outcomes = []
    load = os.getloadavg()[0]
    for _ in range(args.runs):
        for sig in (signal.SIGTERM, signal.SIGKILL):  # interleaved: same machine load
            outcome = run_once(data, sig, args.delay)
            print(outcome, flush=True)
            outcomes.append(outcome)
    rows = []
    for name in ("SIGTERM", "SIGKILL"):
        mine = [o for o in outcomes if o.signal == name]
        saved = [o.to_saved for o in mine if o.to_saved is not None]
        rows.append(
            f"| {name} to worker 1 | {', '.join(lost(o) for o in mine)} | "
            f"{statistics.median(o.to_training_again for o in mine):.1f} s | "
            f"{f'{statistics.median(saved):.1f} s' if saved else '-'} |"
        )
    term = statistics.median(o.to_training_again for o in outcomes if o.signal == "SIGTERM")
    kill = statistics.median(o.to_training_again for o in outcomes if o.signal == "SIGKILL")
    body = f"""## Preemption: steps lost and time to training again (bench/bench_preemption.py)

`tflaunch local --workers 2`, generated MNIST-shaped data (100 steps of global batch 64 per
epoch, steps_per_execution 4, backups at epoch ends), the signal {args.delay:g} s into the
second epoch; {args.runs} run(s) of each, interleaved. Load average when it started:
{load:.1f} on {os.cpu_count()} CPUs (other work shared the machine: compare the rows, not
the absolute seconds).

| signal | steps lost per run | signal -> training again (median) | SIGTERM -> saved (median) |
|---|---|---|---|
{chr(10).join(rows)}

SIGTERM loses no step: every worker saves at the step the signalled worker named and the
group resumes right after it (no retry used). SIGKILL loses the epoch so far (a lower
bound: the last progress line before the kill). Time to training again, SIGTERM / SIGKILL:
{term / kill:.2f} (both restart the processes and re-form the group; the save itself is
the "saved" column).
"""
    print(body)
    if args.write_docs:
        write_section("preemption", body)


if __name__ == "__main__":
    main()
