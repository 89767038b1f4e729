"""The group restart on real pods, in place against recreate, side by side in one run on the
real node of hack/node.sh (issue 35).

One 2-worker MNIST job per mode (indexed layout, checkpoints on a hostPath PersistentVolume):
after the first epoch's backup, the training program inside worker 1's container is
SIGKILLed (its host PID: the child of the container's PID 1, the wrapper), and again each
time the group is training again, `--kills` times in all. Measured from each kill to the
chief's first `TFLAUNCH_PROGRESS` line after it (containerd's timestamp; the trainer prints
it at the end of its first execution): training again. In place, split by worker 0's
wrapper lines: the kill noticed (a peer moved on, or its own program failed), every peer at
the barrier, the program's backup restored, the first step. Recreate, by the pods: the
replacements created, all Running, the first step.

Not a `bench_*.py` (it needs root, the node's binaries and the trainer image archive, and
takes minutes). Run it as root:

    .venv/bin/python bench/node_restart.py [--kills 3] [--archive PATH] [--write-docs]

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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import load, machine
from bench.docs_section import publish
from bench.node_pods import (
    INDEX,
    Cluster,
    image_ref,
    progress_lines,
    sh,
    shared_claim,
    spec,
    timestamp,
    until,
)

EPOCHS, STEPS = 4, 150
MARKS = (
    ("noticed", re.compile(r"restarting in place at generation|stopping this generation")),
    ("barrier", re.compile(r"generation \d+: every peer is here")),
    ("launched", re.compile(r"\bstarting \S")),
    ("program", re.compile(r"worker \d+ of \d+ at ")),
    ("strategy", re.compile(r"strategy ready in")),
    ("restored", re.compile(r"resuming from the backup")),
)
"""Worker 0's wrapper and trainer lines that split an in-place restart."""


def chiefs(cluster: Cluster, namespace: str) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in cluster.pods(namespace)
        if p["metadata"].get("annotations", {}).get(INDEX) == "0"
    ]


def worker_1(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    for pod in cluster.pods(namespace):
        annotations = pod["metadata"].get("annotations", {})
        statuses = pod["status"].get("containerStatuses", [])
        if annotations.get(INDEX) == "1" and any("running" in c["state"] for c in statuses):
            return pod
    return None


def program_pid(pod: str) -> int | None:
    """The host PID of the program the wrapper (the container's PID 1) runs, once it runs."""
    container = sh("node.sh", "crictl", "ps", "-q", "--label", f"io.kubernetes.pod.name={pod}")
    if not container:
        return None
    wrapper = json.loads(sh("node.sh", "crictl", "inspect", container))["info"]["pid"]
    children = Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()
    return int(children[0]) if children else None


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


def first_step_after(cluster: Cluster, namespace: str, since: float) -> float | None:
    stamps = [
        stamp
        for name in chiefs(cluster, namespace)
        for stamp, _ in progress_lines(cluster, namespace, name)
        if stamp > since
    ]
    return min(stamps) if stamps else None


def split(cluster: Cluster, namespace: str, since: float, until_: float) -> dict[str, float]:
    """In place: worker 0's marks between the kill and training again, from the kill."""
    times: dict[str, float] = {}
    for name in chiefs(cluster, namespace):
        for stamp, text in timed_lines(cluster, namespace, name):
            for mark, pattern in MARKS:
                if since < stamp <= until_ and mark not in times and pattern.search(text):
                    times[mark] = stamp - since
    return times


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
    if cluster.tflaunch("submit", str(job_spec)).returncode != 0:
        raise SystemExit("submit failed")
    volume = Path(sh("node.sh", "state")) / "volumes" / namespace
    until(lambda: True if any(volume.glob("**/chief/checkpoint")) else None, "the first backup")
    results = []
    for kill in range(kills):
        uids = {p["metadata"]["uid"] for p in cluster.pods(namespace)}
        pod = until(lambda: worker_1(cluster, namespace), "worker 1 running")
        pid = until(functools.partial(program_pid, pod["metadata"]["name"]), "its program")
        before = load()
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        first = until(
            functools.partial(first_step_after, cluster, namespace, killed), "training again"
        )
        times: dict[str, Any] = {"kill": kill + 1, "first_step": first - killed, "load": before}
        times.update(split(cluster, namespace, killed, first))
        times.update(recreated(cluster, namespace, killed, uids))
        results.append(times)
        print(namespace, times, flush=True)
    until(lambda: done(cluster, namespace), "Succeeded")
    return results


def done(cluster: Cluster, namespace: str) -> bool | None:
    status = json.loads(cluster.tflaunch("status", "mnist", "-n", namespace, "-o", "json").stdout)
    state = status["status"]["state"]
    if state == "Failed":
        raise SystemExit(f"{namespace}: the job failed: {status['status']}")
    return True if state == "Succeeded" else None


def markdown(results: dict[str, list[dict[str, Any]]], kills: int) -> str:
    def cell(run: dict[str, Any], key: str) -> str:
        return f"{run[key]:.1f} s" if key in run else "-"

    columns = (
        ("noticed", "noticed"),
        ("barrier", "barrier passed"),
        ("launched", "program launched"),
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
    said = ", ".join(f"{mode} {median:.1f} s" for mode, median in medians.items())
    if len(medians) == 2:
        said += f" ({medians['recreate'] / medians['inPlace']:.1f}x)"
    return (
        f"Machine: {machine()}. One 2-worker MNIST job per mode (examples/mnist.yaml, indexed "
        f"layout, {EPOCHS} epochs of {STEPS} steps, checkpoints on a hostPath "
        f"PersistentVolume); worker 1's training program SIGKILLed {kills} times in each, "
        "after the first backup and then each time the group trains again. Times from each "
        "kill (containerd's log timestamps; pods: the API's, whole seconds).\n\n"
        + "\n".join(rows)
        + f"\n\nMedian kill -> training again: {said}.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--archive", type=Path, help="the trainer image archive to import")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument(
        "--modes", default="inPlace,recreate", help="comma-separated: inPlace,recreate"
    )
    args = parser.parse_args()
    archive = args.archive or Path(sh("images.sh", "path", "trainer"))
    image = image_ref(archive)
    cache = Path(sh("cluster.sh", "port-lock")).parent
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp, open(cache / "node.lock", "a") as lock:
        print("waiting for the node lock ...", flush=True)
        fcntl.flock(lock, fcntl.LOCK_EX)
        kubeconfig = Path(tmp) / "kubeconfig"
        sh("node.sh", "down")
        sh("cluster.sh", "up", str(kubeconfig))
        try:
            sh("node.sh", "up", str(kubeconfig), sh("node.sh", "smoke-image"))
            sh("node.sh", "import", str(archive))
            cluster = Cluster(kubeconfig)
            for mode in args.modes.split(","):
                namespace = f"restart-{mode.lower()}"
                cluster.kubectl("create", "namespace", namespace)
                claim = shared_claim(cluster, namespace)
                path = spec(Path(tmp) / f"{namespace}.yaml", namespace, image, EPOCHS, STEPS, claim)
                document = yaml.safe_load(path.read_text())
                document["spec"].update(restart=mode, backoffLimit=args.kills + 1)
                path.write_text(yaml.safe_dump(document))
                results[mode] = one_job(cluster, namespace, path, args.kills)
        finally:
            try:
                sh("node.sh", "down")
            finally:
                sh("cluster.sh", "down", str(kubeconfig))
    print(json.dumps(results, indent=1))
    publish(
        "restart",
        "Group restart on real pods: in place vs recreate (bench/node_restart.py)",
        markdown(results, args.kills),
        write=args.write_docs,
    )


if __name__ == "__main__":
    main()
