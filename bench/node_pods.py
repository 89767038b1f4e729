"""Figures on real pods (issue 22 item 4): MNIST in containers on the real node of
hack/node.sh, against `tflaunch local` on the same machine with the same trainer settings.

On the real node (hack/cluster.sh's control plane + hack/node.sh, the trainer image of
hack/images.sh imported into its containerd), one job of 2 workers, indexed layout:

* submit -> all workers Running (every container started) -> the first training step (the
  timestamp containerd gave the chief's first `TFLAUNCH_PROGRESS` line, which the trainer
  prints at the end of the first step) -> Succeeded (every pod Succeeded);
* a second job with its checkpoints on a hostPath PersistentVolume: after the first epoch,
  worker 1's container is SIGKILLed (`crictl stop --timeout 0`) -> the new pods all Running
  -> the new chief's first step (training again) -> Succeeded.

Then `tflaunch local` runs the first job's spec on this machine: start -> first step (the
first `TFLAUNCH_PROGRESS` line in worker 0's log, polled every 0.1 s) -> done.

Not a `bench_*.py`: `make bench` runs every one of those, and this one needs root, the node's
binaries and the trainer image archive, and takes minutes. Run it as root:

    .venv/bin/python bench/node_pods.py [--epochs 2 --steps 50] [--write-docs]

It takes ~/.cache/tflaunch/node.lock as tests/node does (the node is a singleton per
machine), so it waits while a test session holds the node.
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import ROOT, load, machine
from bench.docs_section import publish

HACK = ROOT / "hack"
TFLAUNCH = Path(sys.executable).parent / "tflaunch"
REAL_NODE = "tflaunch.dev/real-node"
INDEX = "batch.kubernetes.io/job-completion-index"
RESUMED = r"resuming from the backup.* at step (?P<step>\d+)"
T = TypeVar("T")


def sh(script: str, *args: str, timeout: float = 3600) -> str:
    proc = subprocess.run(
        ["bash", str(HACK / script), *args], capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise SystemExit(f"hack/{script} {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout.strip()


class Cluster:
    def __init__(self, kubeconfig: Path) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        self.kubectl_bin = str(Path(sh("cluster.sh", "bin")) / "kubectl")

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        proc = subprocess.run(
            [self.kubectl_bin, *args], input=stdin, capture_output=True, text=True,
            env=self.env, timeout=120,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(
            self.kubectl("get", "pods", "-n", namespace, "-o", "json")
        )["items"]
        return items

    def tflaunch(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(TFLAUNCH), *args], capture_output=True, text=True, env=self.env, timeout=1800
        )


def until(probe: Callable[[], T | None], what: str, timeout: float = 1200) -> T:
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def image_ref(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("manifest.json")
        assert member is not None
        return str(json.load(member)[0]["RepoTags"][0])


def spec(path: Path, namespace: str, image: str, epochs: int, steps: int, claim: str = "") -> Path:
    """examples/mnist.yaml pointed at the real node, as tests/node does."""
    document: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "mnist.yaml").read_text())
    document["metadata"]["namespace"] = namespace
    document["spec"].update(
        image=image,
        imagePullPolicy="Never",
        nodeSelector={REAL_NODE: "true"},
        tolerations=[{"key": REAL_NODE, "operator": "Exists", "effect": "NoSchedule"}],
        resources={
            "requests": {"cpu": "250m", "memory": "1Gi"},
            "limits": {"cpu": "2", "memory": "4Gi"},
        },
        restart="recreate",  # its figures are of new pods (bench/node_restart.py: in place)
    )
    document["spec"]["trainer"].update(epochs=epochs, stepsPerEpoch=steps)
    if claim:
        document["spec"]["checkpoint"] = {"claimName": claim}
    path.write_text(yaml.safe_dump(document))
    return path


def timestamp(text: str) -> float:
    """containerd's RFC 3339 timestamp (nanoseconds) as seconds since the epoch."""
    day, _, fraction = text.rstrip("Z").partition(".")
    moment = datetime.datetime.fromisoformat(day).replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp() + float(f"0.{fraction or 0}")


def progress_lines(
    cluster: Cluster, namespace: str, pod: str
) -> list[tuple[float, dict[str, Any]]]:
    """The chief's `TFLAUNCH_PROGRESS` lines, each with the time containerd logged it."""
    try:
        log = cluster.kubectl("logs", "--timestamps", pod, "-n", namespace)
    except RuntimeError:
        return []  # not started yet
    found = []
    for line in log.splitlines():
        stamp, _, text = line.partition(" ")
        if text.startswith("TFLAUNCH_PROGRESS "):
            found.append((timestamp(stamp), json.loads(text.split(" ", 1)[1])))
    return found


def running(pods: list[dict[str, Any]], workers: int) -> bool:
    started = [
        p for p in pods
        if any("running" in c.get("state", {}) for c in p["status"].get("containerStatuses", []))
    ]  # fmt: skip
    return len(started) == workers


def chief(pods: list[dict[str, Any]]) -> str | None:
    for pod in pods:
        if pod["metadata"].get("annotations", {}).get(INDEX) == "0":
            return str(pod["metadata"]["name"])
    return None


def follow(cluster: Cluster, namespace: str, since: float, seen: set[str]) -> dict[str, float]:
    """From `since`: all the job's new pods Running, the new chief's first step, Succeeded."""

    def new() -> list[dict[str, Any]]:
        return [p for p in cluster.pods(namespace) if p["metadata"]["uid"] not in seen]

    up = until(lambda: time.time() if running(new(), 2) else None, "all workers Running")
    name = until(lambda: chief(new()), "the chief")

    def first_step() -> float | None:
        lines = progress_lines(cluster, namespace, name)
        return lines[0][0] if lines else None

    first = until(first_step, "a step")

    def done() -> float | None:
        pods = new()
        phases = [p["status"].get("phase") for p in pods]
        if "Failed" in phases and len(pods) >= 2 and set(phases) == {"Failed"}:
            raise SystemExit(f"the job failed: {phases}")
        return time.time() if phases.count("Succeeded") == 2 else None

    end = until(done, "Succeeded")
    created = min(timestamp(p["metadata"]["creationTimestamp"]) for p in new())
    times = {"created": created - since, "running": up - since, "first_step": first - since}
    resumed = re.search(RESUMED, cluster.kubectl("logs", name, "-n", namespace))
    if resumed:
        times["resumed_at_step"] = float(resumed["step"])
    return {**times, "succeeded": end - since}


def run_job(cluster: Cluster, namespace: str, job_spec: Path) -> dict[str, float]:
    start = time.time()
    submit = cluster.tflaunch("submit", str(job_spec))
    if submit.returncode != 0:
        raise SystemExit(f"submit failed: {submit.stderr}")
    return follow(cluster, namespace, start, set())


def shared_claim(cluster: Cluster, namespace: str, name: str = "checkpoints") -> str:
    """A claim `name` bound to a hostPath PersistentVolume on the node's disk."""
    path = Path(sh("node.sh", "state")) / "volumes" / namespace
    path.mkdir(parents=True)
    os.chown(path, 10001, 10001)
    volume = {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": namespace},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
            "storageClassName": "", "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(path), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": name},
        },
    }  # fmt: skip
    claim = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": namespace,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }  # fmt: skip
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(volume))
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(claim))
    return name


def kill_run(cluster: Cluster, namespace: str, job_spec: Path, steps: int) -> dict[str, float]:
    """Worker 1's container SIGKILLed after the first epoch; times from the kill."""
    submit = cluster.tflaunch("submit", str(job_spec))
    if submit.returncode != 0:
        raise SystemExit(f"submit failed: {submit.stderr}")

    def epoch_done() -> list[dict[str, Any]] | None:
        pods = cluster.pods(namespace)
        for pod in pods:
            if pod["status"].get("phase") == "Failed":  # before the kill: say why, stop
                log = cluster.kubectl("logs", pod["metadata"]["name"], "-n", namespace)
                raise SystemExit(f"{pod['metadata']['name']} failed:\n{log[-2000:]}")
        name = chief(pods)
        lines = progress_lines(cluster, namespace, name) if name else []
        return pods if any(p["epoch"] == 1 and p["step"] == steps for _, p in lines) else None

    pods = until(epoch_done, "the first epoch")
    victim = next(p for p in pods if p["metadata"]["annotations"].get(INDEX) == "1")
    name = victim["metadata"]["name"]
    container = sh("node.sh", "crictl", "ps", "-q", "--label", f"io.kubernetes.pod.name={name}")
    killed = time.time()
    sh("node.sh", "crictl", "stop", "--timeout", "0", container)
    times = follow(cluster, namespace, killed, {p["metadata"]["uid"] for p in pods})
    status = json.loads(cluster.tflaunch("status", "mnist", "-n", namespace, "-o", "json").stdout)
    times["restarts"] = float(max(w["restarts"] for w in status["status"]["workers"]))
    return times


def image_data(archive: Path) -> Path | None:
    """The image's /opt/tflaunch/mnist.npz, from the bundle `hack/images.sh run` unpacked."""
    found = archive.parent / "bundles" / archive.stem / "rootfs" / "opt" / "tflaunch" / "mnist.npz"
    return found if found.exists() else None


def local_run(job_spec: Path, workdir: Path, data: Path | None) -> dict[str, float]:
    """`tflaunch local` on the same spec: start -> worker 0's first progress line -> done."""
    log = workdir / "logs" / "worker-0.log"
    start = time.time()
    proc = subprocess.Popen(
        [str(TFLAUNCH), "local", str(job_spec), "--workdir", str(workdir),
         *(["--data", str(data)] if data else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    first = None
    while proc.poll() is None:
        if first is None and log.exists() and "TFLAUNCH_PROGRESS " in log.read_text():
            first = time.time()
        time.sleep(0.1)
    end = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"tflaunch local exited {proc.returncode}")
    return {"first_step": (first or end) - start, "succeeded": end - start}


def markdown(results: dict[str, Any]) -> str:
    def cell(run: dict[str, float], key: str) -> str:
        return f"{run[key]:.1f} s" if key in run else "-"

    rows = [
        "| run | pods created | all workers Running | first step | Succeeded / done | resumed at step | load before |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for label, run in results["runs"]:
        step = f"{run['resumed_at_step']:.0f}" if "resumed_at_step" in run else "-"
        rows.append(
            f"| {label} | {cell(run, 'created')} | {cell(run, 'running')} "
            f"| {cell(run, 'first_step')} | {cell(run, 'succeeded')} | {step} | {run['load']} |"
        )
    data = results["local_data"]
    local_data = (
        "the image's own mnist.npz (from its unpacked bundle)" if data else "its default data"
    )
    return (
        f"Machine: {machine()}. Workload: examples/mnist.yaml, 2 workers, indexed layout, "
        f"{results['epochs']} epoch(s) of {results['steps']} steps (the kill run: "
        f"{results['kill_epochs']} epochs, checkpoints on a hostPath PersistentVolume). "
        f"Node start (`hack/node.sh up`): {results['node_up']:.1f} s; image import into "
        f"containerd: {results['import']:.1f} s. `tflaunch local` trains on {local_data}. "
        f"Times from `submit` (pods created: the API's creationTimestamp, whole seconds; the "
        f"kill run: from the kill).\n\n" + "\n".join(rows) + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    archive = Path(sh("images.sh", "path", "trainer"))
    image = image_ref(archive)
    cache = Path(sh("cluster.sh", "port-lock")).parent
    results: dict[str, Any] = {"epochs": args.epochs, "steps": args.steps, "kill_epochs": 3}
    results["local_data"] = image_data(archive)
    runs: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as tmp, open(cache / "node.lock", "a") as lock:
        print("waiting for the node lock ...", flush=True)
        fcntl.flock(lock, fcntl.LOCK_EX)
        kubeconfig = Path(tmp) / "kubeconfig"
        sh("node.sh", "down")
        sh("cluster.sh", "up", str(kubeconfig))
        try:
            began = time.time()
            sh("node.sh", "up", str(kubeconfig), sh("node.sh", "smoke-image"))
            results["node_up"] = time.time() - began
            began = time.time()
            sh("node.sh", "import", str(archive))
            results["import"] = time.time() - began
            cluster = Cluster(kubeconfig)
            for repeat in range(args.repeats):
                namespace = f"bench-{repeat}"
                cluster.kubectl("create", "namespace", namespace)
                job = spec(
                    Path(tmp) / f"{namespace}.yaml", namespace, image, args.epochs, args.steps
                )
                before = load()
                runs.append(
                    (
                        f"real pods #{repeat + 1}",
                        {**run_job(cluster, namespace, job), "load": before},
                    )
                )
                print(runs[-1], flush=True)
                namespace = f"bench-kill-{repeat}"
                cluster.kubectl("create", "namespace", namespace)
                claim = shared_claim(cluster, namespace)
                job = spec(Path(tmp) / f"{namespace}.yaml", namespace, image, 3, 150, claim)
                before = load()
                killed = kill_run(cluster, namespace, job, 150)
                runs.append(
                    (
                        f"kill worker 1 -> (times from the kill) #{repeat + 1}",
                        {**killed, "load": before},
                    )
                )
                print(runs[-1], flush=True)
        finally:
            try:
                sh("node.sh", "down")
            finally:
                sh("cluster.sh", "down", str(kubeconfig))
        for repeat in range(args.repeats):
            job = spec(Path(tmp) / "local.yaml", "default", image, args.epochs, args.steps)
            before = load()
            workdir = Path(tmp) / f"local-{repeat}"
            local = local_run(job, workdir, results["local_data"])
            runs.append((f"`tflaunch local` #{repeat + 1}", {**local, "load": before}))
            print(runs[-1], flush=True)
    results["runs"] = runs
    print(json.dumps(results, indent=1, default=str))
    publish(
        "node", "MNIST on real pods (bench/node_pods.py)", markdown(results), write=args.write_docs
    )


if __name__ == "__main__":
    main()
