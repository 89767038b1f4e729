"""Recovery: a worker dies mid-training; how long until the group trains again?

`tflaunch local --workers 2` on trainer.synthetic's 60k MNIST-format data with
`--save-freq 64` (a backup every 2 executions of 32 steps). Once the first backup is written
and training went on for a second, worker 1's whole process group (wrapper and trainer) gets
SIGKILL, as when a container is OOM-killed. bench/hooks/sitecustomize.py timestamps every
process's phases; the benchmark timestamps tflaunch's own console lines. Then the
breakdown, from the kill to the restarted group's first finished execution:

  stop         tflaunch notices the exit (0.2 s poll) and stops the survivor (SIGTERM,
               forwarded by the wrapper), until it prints "restarting"
  restart      until the new wrappers' processes exist
  wrapper      interpreter start and the wrapper's rendezvous (every peer accepts TCP)
  tensorflow   the trainer's process start and imports, up to TensorFlow ready
  rendezvous   trainer's rendezvous and MultiWorkerMirroredStrategy (gRPC, coordination)
  model        build and compile
  restore      datasets, fit's set-up and the BackupAndRestore restore
  first step   the first execution after the restore (32 steps, tracing included)

Each phase ends when the later of the two workers finished it. Also: seconds per backup save.

Two ways of stopping the survivor are run in alternation: tflaunch's (SIGTERM, then SIGKILL
BROKEN_GROUP_GRACE_SECONDS after a worker ended without saving: the survivor's coordinated
save can never finish) and the earlier one ("wait for the survivor": SIGTERM, then wait the
whole grace period while its save fails by itself).

Run: .venv/bin/python bench/bench_recovery.py [--write-docs]   (BENCH=full: more repeats)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    FULL,
    free_ports,
    load,
    machine,
    read_phases,
    stats,
    synthetic_npz,
    trainer_env,
)
from bench.docs_section import publish

STEPS = ("stop", "restart", "wrapper", "tensorflow", "rendezvous", "model", "restore", "first step")


def _wait_for(phases: Path, predicate: Any, timeout: float = 600) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = read_phases(phases) if phases.exists() else []
        if predicate(events):
            return events
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for phases in {phases}")


def _last(events: list[dict], restart: int, role: str, event: str) -> float:
    """When the later worker reached `event` in attempt `restart`."""
    times: dict[str, float] = {}
    for e in events:
        if e["restart"] == restart and e["role"] == role and e["event"] == event:
            times.setdefault(e["worker"], e["t"])
    if len(times) < 2:
        raise SystemExit(f"missing {role} {event} of attempt {restart}: {times}")
    return max(times.values())


# The launcher with the earlier stop: the survivors get the whole grace period.
WAIT_FOR_SURVIVOR = (
    "import sys, launcher.local.runner as runner; runner.BROKEN_GROUP_GRACE_SECONDS = 1e9; "
    "from launcher.cli.main import main; sys.argv[0] = 'tflaunch'; main()"
)
STOPS = {
    "SIGKILL 2 s after (tflaunch)": ["-m", "launcher"],
    "wait for the survivor (before)": ["-c", WAIT_FOR_SURVIVOR],
}


def one_run(
    data: Path, workdir: Path, save_freq: int, launcher: list[str]
) -> tuple[dict[str, float], list[float]]:
    phases = workdir / "phases"
    command = [
        sys.executable, *launcher, "local", "--workers", "2", "--epochs", "3",
        "--data", str(data), "--workdir", str(workdir / "run"), "--set", f"spec.trainer.saveFreq={save_freq}", "--", "--max-test-examples", "512",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, env=trainer_env(phases=phases), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    lines: list[tuple[float, str]] = []

    def pump() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            lines.append((time.time(), raw.decode(errors="replace")))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        events = _wait_for(phases, lambda ev: any(e["event"] == "save_end" for e in ev))
        time.sleep(1.0)
        victim = next(
            e["pid"]
            for e in events
            if e["role"] == "wrapper" and e["worker"] == "1" and e["restart"] == 0
        )
        killed = time.time()
        os.killpg(victim, signal.SIGKILL)
        events = _wait_for(
            phases,
            lambda ev: sum(1 for e in ev if e["restart"] == 1 and e["event"] == "first_step") >= 2,
        )
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(timeout=5)
    restarting = next(t for t, line in lines if "restarting" in line and t > killed)
    marks = [
        killed,
        restarting,
        min(e["t"] for e in events if e["restart"] == 1 and e["event"] == "start"),
        _last(events, 1, "wrapper", "peers"),
        _last(events, 1, "trainer", "tensorflow"),
        _last(events, 1, "trainer", "strategy"),
        _last(events, 1, "trainer", "model"),
        _last(events, 1, "trainer", "restored"),
        _last(events, 1, "trainer", "first_step"),
    ]
    breakdown = {name: marks[i + 1] - marks[i] for i, name in enumerate(STEPS)}
    breakdown["total"] = marks[-1] - killed
    saves: list[float] = []
    begun: dict[int, float] = {}
    for e in events:
        if e["event"] == "save_begin":
            begun[e["pid"]] = e["t"]
        elif e["event"] == "save_end" and e["pid"] in begun:
            saves.append(e["t"] - begun.pop(e["pid"]))
    return breakdown, saves


def heartbeat_run(data: Path, workdir: Path, timeout: float) -> float:
    """Seconds from SIGKILL of worker 1 (a non-chief) to worker 0's exit, with the trainer
    run directly (no wrapper, no tflaunch): the coordination service's detection alone,
    which is what a surviving pod on a cluster relies on."""
    phases = workdir / "phases"
    ports = free_ports(2)
    processes = []
    for index in range(2):
        env = trainer_env({"WORKER_INDEX": str(index)}, phases)
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
             "task": {"type": "worker", "index": index}}
        )  # fmt: skip
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "trainer", "--data", str(data), "--epochs", "3",
                 "--expect-gpus", "0", "--heartbeat-timeout", str(timeout),
                 "--model-dir", str(workdir / "model"), "--checkpoint-dir", str(workdir / "ckpt")],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )  # fmt: skip
    try:
        _wait_for(phases, lambda ev: sum(1 for e in ev if e["event"] == "first_step") >= 2)
        time.sleep(1.0)
        processes[1].kill()
        killed = time.monotonic()
        processes[0].wait(timeout=300)
        return time.monotonic() - killed
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5 if FULL else 3)
    parser.add_argument("--save-freq", type=int, default=64)
    parser.add_argument(
        "--heartbeat",
        type=float,
        action="append",
        help="also time detection with this "
        "--heartbeat-timeout (0 = TensorFlow's default); repeatable",
    )
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    heartbeats = args.heartbeat or [0.0, 4.0]

    runs: dict[str, list[dict[str, float]]] = {name: [] for name in STOPS}
    detection: dict[float, list[float]] = {h: [] for h in heartbeats}
    saves: list[float] = []
    loads: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tflaunch-recovery-") as tmp:
        data = synthetic_npz(Path(tmp) / "mnist.npz")
        for repeat in range(args.repeats):
            before = load()
            for index, (name, launcher) in enumerate(STOPS.items()):
                workdir = Path(tmp) / f"r{repeat}-{index}"
                breakdown, save_seconds = one_run(data, workdir, args.save_freq, launcher)
                runs[name].append(breakdown)
                saves += save_seconds
                print(f"run {repeat} ({name}): "
                      + ", ".join(f"{k} {v:.1f}" for k, v in breakdown.items())
                      + f"; saves {[round(s, 2) for s in save_seconds]}", flush=True)  # fmt: skip
            for h in heartbeats:
                ckpt = Path(tmp) / f"hb{repeat}-{h}" / "ckpt"
                ckpt.mkdir(parents=True)
                detection[h].append(heartbeat_run(data, ckpt.parent, h))
            loads.append(f"{before}->{load()}")
            print(f"detection {[(h, round(d[-1], 1)) for h, d in detection.items()]}; "
                  f"load {loads[-1]}", flush=True)  # fmt: skip

    names = list(STOPS)
    lines = [
        f"`tflaunch local --workers 2`, `--save-freq {args.save_freq}`, worker 1's process "
        f"group SIGKILLed after the first backup; {args.repeats} rounds, the two ways of "
        f"stopping the survivor alternating in each; seconds, min / median / max. "
        f"{machine()}. Load average (1/5/15 min) before/after each round: "
        f"{', '.join(loads)}.",
        "",
        f"| step | {' | '.join(names)} |",
        "| --- |" + " ---: |" * len(names),
    ]
    for step in (*STEPS, "total"):
        label = "**kill -> training again (total)**" if step == "total" else step
        cells = " | ".join(stats([r[step] for r in runs[name]], "{:.2f}") for name in names)
        lines.append(f"| {label} | {cells} |")
    lines += [
        "",
        f"One backup (BackupAndRestore save, every worker): {stats(saves, '{:.2f}')} s "
        f"over {len(saves)} saves.",
    ]
    lines += [
        "",
        "Detection by the coordination service alone (2 trainers run directly, worker 1 "
        "SIGKILLed, until worker 0 exits 1): what a surviving pod relies on in a cluster.",
        "",
        "| `--heartbeat-timeout` | seconds to the survivor's exit |",
        "| --- | ---: |",
    ]
    for h, seconds in detection.items():
        label = "0 (TensorFlow's default, 10 s)" if not h else f"{h:g} s"
        lines.append(f"| {label} | {stats(seconds, '{:.1f}')} |")
    text = "\n".join(lines)
    publish("recovery", "Recovery (bench/bench_recovery.py)", text, write=args.write_docs)


if __name__ == "__main__":
    main()
