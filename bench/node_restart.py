"""The group restart on real pods, in place against recreate, side by side in one run on the
real node of hack/node.sh (issue 35).

One 2-worker MNIST job per mode (indexed layout, checkpoints on a hostPath PersistentVolume):
after the first epoch's backup, the training program inside worker 1's container is
SIGKILLed (its host PID: the child of the container's PID 1, the wrapper), and again each
time the group has trained again for TRAINING_BETWEEN_KILLS seconds, `--kills` times in all.
Mode `inPlaceNoStandby` is in place without the warm standby (`trainer.standby`), so the
standby's share is read side by side. Measured from each kill to the
chief's first `TFLAUNCH_PROGRESS` line after it (containerd's timestamp; the trainer prints
it at the end of its first execution): training again. In place, split by worker 0's
wrapper lines: the kill noticed (a peer moved on, or its own program failed), every peer at
the barrier, the program's backup restored, the first step. Recreate, by the pods: the
replacements created, all Running, the first step.

Mode `local`: `tflaunch local` on the same spec on this machine (its group restart: stop
every worker, start them all again), worker 1's program (the child of its wrapper) killed
the same way, after the first backup and each time the group trains again; the lines of
worker 0's log and of tflaunch's console are stamped as they are written (read every
0.05 s), and split by the same marks (noticed: tflaunch's "restarting all" line).

Not a `bench_*.py` (it needs root, the node's binaries and the trainer image archive, and
takes minutes). Run it as root:

    .venv/bin/python bench/node_restart.py [--kills 3]
        [--modes inPlace,inPlaceNoStandby,recreate,local]
        [--archive PATH] [--write-docs]

It takes ~/.cache/tflaunch/node.lock as tests/node does.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import load, machine, synthetic_npz
from bench.docs_section import publish
from bench.node_pods import (
    INDEX,
    TFLAUNCH,
    Cluster,
    image_data,
    image_ref,
    sh,
    shared_claim,
    spec,
    timestamp,
    until,
)
from trainer import standby

EPOCHS, STEPS = 8, 234
"""Full MNIST epochs (234 steps of 256 images, the most the data has): about 12 s each on an
idle machine, and every kill resumes at an epoch's start, so 8 outlast 3 kills."""
ENDED = "the job ended before kill {kill}: it must outlast the kills (EPOCHS, STEPS)"
TRAINING_BETWEEN_KILLS = 10.0
"""Seconds the group trains again before the next kill: a failure mid-training, not a crash
loop (a standby starts 10 s into a generation, `trainer.standby`)."""
MODES = ("inPlace", "inPlaceNoStandby", "recreate", "local")
MARKS = (
    (
        "noticed",
        re.compile(
            r"restarting in place at generation|stopping this generation|restarting all \d+ workers"
        ),
    ),
    ("barrier", re.compile(r"generation \d+: every peer is here")),
    ("launched", re.compile(r"\bstarting \S")),
    ("program", re.compile(r"worker \d+ of \d+ at ")),
    ("strategy", re.compile(r"strategy ready in")),
    ("restored", re.compile(r"resuming from the backup")),
    ("standby", re.compile(r"\(in the standby: ")),
)
"""Worker 0's wrapper and trainer lines (and `tflaunch local`'s console) that split a
restart."""
PROGRESS = "TFLAUNCH_PROGRESS "
PROGRAM_START = dict(MARKS)["program"]


def chiefs(cluster: Cluster, namespace: str) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in cluster.pods(namespace)
        if p["metadata"].get("annotations", {}).get(INDEX) == "0"
    ]


def worker_1(cluster: Cluster, namespace: str, kill: int) -> dict[str, Any] | None:
    """Worker 1's pod while its container runs; a bench error once the job has ended."""
    for pod in cluster.pods(namespace):
        annotations = pod["metadata"].get("annotations", {})
        statuses = pod["status"].get("containerStatuses", [])
        if annotations.get(INDEX) != "1":
            continue
        if any("running" in c["state"] for c in statuses):
            return pod
        if pod["status"].get("phase") == "Succeeded":
            raise SystemExit(ENDED.format(kill=kill))
    return None


def killable(cluster: Cluster, namespace: str, kill: int) -> tuple[str, int] | None:
    """Worker 1's pod name and its program's host PID, once both run."""
    pod = worker_1(cluster, namespace, kill)
    if pod is None:
        return None
    pid = program_pid(pod["metadata"]["name"])
    return (pod["metadata"]["name"], pid) if pid else None


def program_pid(pod: str) -> int | None:
    """The host PID of the program the wrapper (the container's PID 1) runs, once it runs."""
    container = sh("node.sh", "crictl", "ps", "-q", "--label", f"io.kubernetes.pod.name={pod}")
    if not container:
        return None
    wrapper = json.loads(sh("node.sh", "crictl", "inspect", container))["info"]["pid"]
    # Every thread's children: a standby's process is its starter thread's child.
    try:  # 0, or gone: the container is between two runs
        tasks = list(Path(f"/proc/{wrapper}/task").iterdir()) if wrapper else []
        children = [pid for task in tasks for pid in (task / "children").read_text().split()]
    except OSError:
        return None
    programs = [  # not a waiting standby (trainer.standby)
        int(pid) for pid in children if process_name(int(pid)) != standby.PROCESS_NAME
    ]
    return programs[0] if programs else None


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def timed_lines(cluster: Cluster, namespace: str, pod: str) -> list[tuple[float, str]]:
    try:
        log = cluster.kubectl("logs", "--timestamps", pod, "-n", namespace)
    except RuntimeError:
        return []
    lines = []
    for line in log.splitlines():
        stamp, _, text = line.partition(" ")
        lines.append((timestamp(stamp), text))
    return lines


def training_again(lines: list[tuple[float, str]], since: float) -> float | None:
    """When the chief's next attempt first reported progress after `since`: its first
    `TFLAUNCH_PROGRESS` line after the new program's start line. A progress line between
    the kill and the restart is the old attempt's, not training again."""
    started = None
    for stamp, text in sorted(lines):
        if stamp <= since:
            continue
        if started is None and PROGRAM_START.search(text):
            started = stamp
        elif started is not None and text.startswith(PROGRESS):
            return stamp
    return None


def first_step_after(cluster: Cluster, namespace: str, since: float) -> float | None:
    return training_again(chief_lines(cluster, namespace), since)


def split(lines: list[tuple[float, str]], since: float, until_: float) -> dict[str, float]:
    """The marks between the kill and training again in timed `lines`, from the kill."""
    times: dict[str, float] = {}
    for stamp, text in sorted(lines):
        for mark, pattern in MARKS:
            if since < stamp <= until_ and mark not in times and pattern.search(text):
                times[mark] = stamp - since
    return times


def chief_lines(cluster: Cluster, namespace: str) -> list[tuple[float, str]]:
    return [
        line
        for name in chiefs(cluster, namespace)
        for line in timed_lines(cluster, namespace, name)
    ]


def recreated(cluster: Cluster, namespace: str, since: float, seen: set[str]) -> dict[str, float]:
    """Recreate: the replacements' creation and all Running, from the kill."""
    new = [p for p in cluster.pods(namespace) if p["metadata"]["uid"] not in seen]
    if not new:
        return {}
    created = min(timestamp(p["metadata"]["creationTimestamp"]) for p in new)
    started = [
        timestamp(c["state"]["running"]["startedAt"])
        for p in new
        for c in p["status"].get("containerStatuses", [])
        if "running" in c.get("state", {})
    ]
    times = {"created": created - since}
    if len(started) >= 2:
        times["running"] = max(started) - since
    return times


def one_job(cluster: Cluster, namespace: str, job_spec: Path, kills: int) -> list[dict[str, Any]]:
    """Submit, kill worker 1's program `kills` times, each once training again; the times."""
    submit = cluster.tflaunch("submit", str(job_spec))
    if submit.returncode != 0:
        raise SystemExit(f"submit failed: {submit.stderr}")
    volume = Path(sh("node.sh", "state")) / "volumes" / namespace
    until(lambda: True if any(volume.glob("**/chief/checkpoint")) else None, "the first backup")
    results = []
    for kill in range(kills):
        uids = {p["metadata"]["uid"] for p in cluster.pods(namespace)}
        _, pid = until(functools.partial(killable, cluster, namespace, kill + 1), "its program")
        before = load()
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        first = until(
            functools.partial(first_step_after, cluster, namespace, killed), "training again"
        )
        times: dict[str, Any] = {"kill": kill + 1, "first_step": first - killed, "load": before}
        times.update(split(chief_lines(cluster, namespace), killed, first))
        times.update(recreated(cluster, namespace, killed, uids))
        results.append(times)
        print(namespace, times, flush=True)
        time.sleep(TRAINING_BETWEEN_KILLS)
    until(lambda: done(cluster, namespace), "Succeeded")
    return results


class Stamped:
    """Lines as they are written, each with when it was read: `tflaunch local`'s console
    (its stdout) and worker 0's log file (every attempt appends to it)."""

    def __init__(self, console: subprocess.Popen[bytes], log: Path) -> None:
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        assert console.stdout is not None
        self._threads = [
            threading.Thread(target=self._pump, args=(console.stdout,), daemon=True),
            threading.Thread(target=self._tail, args=(log, console), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _add(self, text: str) -> None:
        with self._lock:
            self.lines.append((time.time(), text))

    def _pump(self, stream: Any) -> None:
        for raw in stream:
            self._add(raw.decode(errors="replace").rstrip("\n"))

    def _tail(self, log: Path, console: subprocess.Popen[bytes]) -> None:
        offset, partial = 0, b""
        while console.poll() is None:
            if log.exists():
                with log.open("rb") as f:
                    f.seek(offset)
                    chunk = f.read()
                offset += len(chunk)
                *complete, partial = (partial + chunk).split(b"\n")
                for raw in complete:
                    self._add(raw.decode(errors="replace"))
            time.sleep(0.05)

    def snapshot(self) -> list[tuple[float, str]]:
        with self._lock:
            return list(self.lines)

    def first_step_after(self, since: float) -> float | None:
        return training_again(self.snapshot(), since)


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def local_program(launcher: int, worker: int) -> int | None:
    """The PID of worker `worker`'s program: the child of its wrapper, a child of
    `tflaunch local` whose environment says WORKER_INDEX=`worker`."""
    for wrapper in children(launcher):
        try:
            environ = Path(f"/proc/{wrapper}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"WORKER_INDEX={worker}".encode() in environ:
            programs = children(wrapper)
            return programs[0] if programs else None
    return None


def local_job(job_spec: Path, workdir: Path, data: Path | None, kills: int) -> list[dict[str, Any]]:
    """`tflaunch local` on the job, worker 1's program killed `kills` times; the times."""
    console = subprocess.Popen(
        [str(TFLAUNCH), "local", str(job_spec), "--workdir", str(workdir),
         *(["--data", str(data)] if data else [])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    stamped = Stamped(console, workdir / "logs" / "worker-0.log")
    results = []
    try:
        until(
            lambda: True if any(workdir.glob("**/chief/checkpoint")) else None, "the first backup"
        )
        for kill in range(kills):
            pid = until(functools.partial(local_killable, console, kill + 1), "worker 1's program")
            before = load()
            killed = time.time()
            os.kill(pid, signal.SIGKILL)
            first = until(functools.partial(stamped.first_step_after, killed), "training again")
            times: dict[str, Any] = {"kill": kill + 1, "first_step": first - killed, "load": before}
            times.update(split(stamped.snapshot(), killed, first))
            results.append(times)
            print("local", times, flush=True)
            time.sleep(TRAINING_BETWEEN_KILLS)
        if console.wait(timeout=1800) != 0:
            tail = "\n".join(text for _, text in stamped.snapshot()[-20:])
            raise SystemExit(f"tflaunch local exited {console.returncode}:\n{tail}")
    finally:
        if console.poll() is None:
            console.send_signal(signal.SIGINT)
            console.wait(timeout=120)
    return results


def local_killable(console: subprocess.Popen[bytes], kill: int) -> int | None:
    if console.poll() is not None:
        raise SystemExit(ENDED.format(kill=kill))
    return local_program(console.pid, 1)


def done(cluster: Cluster, namespace: str) -> bool | None:
    status = json.loads(cluster.tflaunch("status", "mnist", "-n", namespace, "-o", "json").stdout)
    state = status["status"]["state"]
    if state == "Failed":
        raise SystemExit(f"{namespace}: the job failed: {status['status']}")
    return True if state == "Succeeded" else None


def markdown(results: dict[str, list[dict[str, Any]]], kills: int) -> str:
    def cell(run: dict[str, Any], key: str) -> str:
        if key == "standby":
            return "yes" if key in run else "no"
        return f"{run[key]:.1f} s" if key in run else "-"

    columns = (
        ("noticed", "noticed"),
        ("barrier", "barrier passed"),
        ("launched", "program launched"),
        ("standby", "in a standby"),
        ("program", "program's Python up"),
        ("strategy", "TensorFlow imported, MWMS up"),
        ("restored", "resume point read"),
        ("created", "replacements created"),
        ("running", "all Running"),
    )
    rows = [
        "| mode | kill | " + " | ".join(title for _, title in columns) + " | training again "
        "| load before |",
        "| --- | ---: | " + " | ".join("---:" for _ in columns) + " | ---: | --- |",
    ]
    for mode, runs in results.items():
        for run in runs:
            cells = " | ".join(cell(run, key) for key, _ in columns)
            rows.append(
                f"| {mode} | #{run['kill']} | {cells} | **{run['first_step']:.1f} s** "
                f"| {run['load']} |"
            )
    medians = {
        mode: statistics.median(r["first_step"] for r in runs) for mode, runs in results.items()
    }
    said = ", ".join(
        f"{mode} {median:.1f} s"
        + (
            f" ({median / medians['inPlace']:.1f}x in place's)"
            if mode != "inPlace" and "inPlace" in medians
            else ""
        )
        for mode, median in medians.items()
    )
    return (
        f"Machine: {machine()}. One 2-worker MNIST job per mode (examples/mnist.yaml, indexed "
        f"layout, {EPOCHS} epochs of {STEPS} steps, checkpoints on a hostPath "
        f"PersistentVolume; `local`: `tflaunch local` on the same spec, on this machine); "
        f"worker 1's training program SIGKILLed {kills} times in each, "
        f"after the first backup and then each time the group has trained again for "
        f"{TRAINING_BETWEEN_KILLS:g} s; `inPlaceNoStandby`: in place with "
        '`TFLAUNCH_STANDBY_IMPORTS=""` (every program starts cold). Times from each '
        "kill (containerd's log timestamps; pods: the API's, whole seconds; `local`: lines "
        "stamped as read, every 0.05 s).\n\n"
        + "\n".join(rows)
        + f"\n\nMedian kill -> training again: {said}.\n"
    )


def node_jobs(
    tmp: Path, archive: Path, modes: list[str], kills: int
) -> dict[str, list[dict[str, Any]]]:
    """Each node mode's job, on a control plane and node brought up for them; `local` in
    between, while they are up, so that every mode shares the machine's background."""
    results: dict[str, list[dict[str, Any]]] = {}
    node_modes = [m for m in modes if m != "local"]
    # `local` alone: the spec's image is not run, and its archive need not be built.
    image = image_ref(archive) if node_modes or archive.exists() else "tflaunch-trainer:local"
    kubeconfig = tmp / "kubeconfig"
    if node_modes:
        sh("node.sh", "down")
        sh("cluster.sh", "up", str(kubeconfig))
    try:
        if node_modes:
            sh("node.sh", "up", str(kubeconfig), sh("node.sh", "smoke-image"))
            sh("node.sh", "import", str(archive))
        for mode in modes:
            if mode == "local":
                path = spec(tmp / "local.yaml", "default", image, EPOCHS, STEPS)
                document = yaml.safe_load(path.read_text())
                document["spec"].update(backoffLimit=kills + 1)
                path.write_text(yaml.safe_dump(document))
                data = image_data(archive) or synthetic_npz(tmp / "mnist.npz")
                results[mode] = local_job(path, tmp / "local", data, kills)
                continue
            cluster = Cluster(kubeconfig)
            namespace = f"restart-{mode.lower()}"
            cluster.kubectl("create", "namespace", namespace)
            claim = shared_claim(cluster, namespace)
            path = spec(tmp / f"{namespace}.yaml", namespace, image, EPOCHS, STEPS, claim)
            document = yaml.safe_load(path.read_text())
            restart = "recreate" if mode == "recreate" else "inPlace"
            document["spec"].update(restart=restart, backoffLimit=kills + 1)
            if mode == "inPlaceNoStandby":
                document["spec"]["env"] = {"TFLAUNCH_STANDBY_IMPORTS": ""}
            path.write_text(yaml.safe_dump(document))
            results[mode] = one_job(cluster, namespace, path, kills)
    finally:
        if node_modes:
            try:
                sh("node.sh", "down")
            finally:
                sh("cluster.sh", "down", str(kubeconfig))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--archive", type=Path, help="the trainer image archive to import")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma-separated, run in this order: {','.join(MODES)}",
    )
    args = parser.parse_args()
    modes = args.modes.split(",")
    if not set(modes) <= set(MODES):
        raise SystemExit(f"--modes: unknown mode in {args.modes!r}; use {','.join(MODES)}")
    archive = args.archive or Path(sh("images.sh", "path", "trainer"))
    cache = Path(sh("cluster.sh", "port-lock")).parent
    with tempfile.TemporaryDirectory() as tmp, open(cache / "node.lock", "a") as lock:
        if modes != ["local"]:  # `local` alone needs no node
            print("waiting for the node lock ...", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        results = node_jobs(Path(tmp), archive, modes, args.kills)
    print(json.dumps(results, indent=1))
    publish(
        "restart",
        "Group restart: in place vs recreate on real pods, and `tflaunch local` "
        "(bench/node_restart.py)",
        markdown(results, args.kills),
        write=args.write_docs,
    )


if __name__ == "__main__":
    main()
