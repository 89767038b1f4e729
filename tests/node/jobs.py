"""The real node's jobs (tests/node): examples/mnist.yaml pointed at the node, the user's own
programs as jobs, a checkpoint claim on the node's disk, the checks on a worker that exited
75, and a SIGKILL of worker 1's container through the node's containerd. The tests of MNIST
in containers themselves run on kind (tests/kind/test_mnist.py), across two nodes; the
node's other modules use these helpers and fixtures."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import ROOT, ControlPlane, Run, eventually
from tests.node.conftest import NODE_NAME, REAL_NODE, node_sh

RESUMED = r"at step (?P<step>\d+) \(epoch \d+, step 0\)"


@pytest.fixture
def namespace(real_node: ControlPlane) -> Iterator[str]:
    name = f"mnist-{uuid.uuid4().hex[:5]}"
    real_node.kubectl("create", "namespace", name)
    yield name
    real_node.kubectl("delete", "namespace", name, "--wait=false", check=False)


def real_node_spec(path: Path, namespace: str, image: str, layout: str) -> Path:
    """examples/mnist.yaml as a user points it at the real node: a local image (never
    pulled), the node's label and taint, small requests (two workers share 2 cores), one
    short epoch."""
    document: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "mnist.yaml").read_text())
    document["metadata"]["namespace"] = namespace
    spec = document["spec"]
    spec.update(
        image=image,
        imagePullPolicy="Never",
        layout=layout,
        nodeSelector={REAL_NODE: "true"},
        tolerations=[{"key": REAL_NODE, "operator": "Exists", "effect": "NoSchedule"}],
        resources={
            "requests": {"cpu": "250m", "memory": "1Gi"},
            "limits": {"cpu": "2", "memory": "4Gi"},
        },
    )
    spec["trainer"].update(epochs=1, stepsPerEpoch=20)
    path.write_text(yaml.safe_dump(document))
    return path


def worker_lines(logs: Run, worker: int) -> list[str]:
    prefix = f"[worker {worker}] "
    return [line[len(prefix) :] for line in logs.out.splitlines() if line.startswith(prefix)]


def own_program_spec(path: Path, namespace: str, image: str, name: str, *args: str) -> Path:
    """real_node_spec for a job that runs the user's program with `args`: no built-in
    trainer section."""
    real_node_spec(path, namespace, image, "indexed")
    document = yaml.safe_load(path.read_text())
    document["metadata"]["name"] = name
    del document["spec"]["trainer"]
    document["spec"]["args"] = list(args)
    path.write_text(yaml.safe_dump(document))
    return path


def succeeded_on_the_node(real_node: ControlPlane, namespace: str, name: str) -> None:
    status = real_node.tflaunch("status", name, "-n", namespace, "-o", "json")
    assert status.code == 0, status
    job = json.loads(status.out)["status"]
    assert job["state"] == "Succeeded", status.out
    assert [(w["phase"], w["exitCode"]) for w in job["workers"]] == [("Succeeded", 0)] * 2
    assert {w["node"] for w in job["workers"]} == {NODE_NAME}, status.out


def failed_pod(cluster: ControlPlane, namespace: str) -> dict[str, Any] | None:
    """A pod of `namespace` that has failed, or None yet."""
    for pod in cluster.get("pods", "-n", namespace)["items"]:
        if pod["status"].get("phase") == "Failed":
            return dict(pod)
    return None


def exited_75_naming_its_peer(
    cluster: ControlPlane, pod: dict[str, Any], namespace: str, seconds: int, in_place: bool
) -> dict[str, Any]:
    """Check that worker `pod` of job mnist exited 75 (rendezvous) and its log names the
    peer it could not reach within `seconds` and why (its DNS name did not resolve): at the
    TensorFlow port, or at the control port (the first barrier) when the job restarts in
    place. Its terminated state."""
    state: dict[str, Any] = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["exitCode"] == 75, state
    index = 1 - int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
    host = f"mnist-worker-{index}.mnist.{namespace}.svc.cluster.local"
    log = cluster.kubectl("logs", pod["metadata"]["name"], "-n", namespace).out
    if in_place:
        said = f"peers worker {index} ({host}:2223, never answered: DNS: "
        assert said in log and f"never reached generation 0 within {seconds}s" in log, log
    else:
        assert f"peers never became reachable within {seconds}s: {host}:2222 (DNS: " in log, log
    return state


@pytest.fixture
def shared_claim(real_node: ControlPlane, namespace: str) -> Iterator[str]:
    """A PersistentVolumeClaim `checkpoints` on the node's disk (host_path_claim)."""
    yield from host_path_claim(real_node, namespace, "checkpoints")


def host_path_claim(real_node: ControlPlane, namespace: str, claim_name: str) -> Iterator[str]:
    """A PersistentVolumeClaim `claim_name` bound to a hostPath PersistentVolume on the
    node's disk (under its state directory, `volumes/NAMESPACE`), owned by the trainer's UID:
    the kubelet applies no fsGroup to hostPath volumes. The volume is deleted after."""
    path = Path(node_sh("state")) / "volumes" / namespace
    path.mkdir(parents=True)
    os.chown(path, 10001, 10001)
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": namespace},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(path), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": claim_name},
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim_name},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": namespace,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    real_node.apply(volume)
    real_node.apply(claim, namespace)
    yield claim_name
    real_node.kubectl("delete", "pv", namespace, "--wait=false", check=False)


def what_happened(cluster: ControlPlane, namespace: str, name: str = "mnist") -> str:
    """For a failed assertion: each container's states and restarts, the namespace's
    warnings and the workers' last log lines, which a CI run keeps only in its report."""
    lines = []
    for pod in cluster.get("pods", "-n", namespace)["items"]:
        for container in pod["status"].get("containerStatuses", []):
            states = {k: container.get(k) for k in ("state", "lastState", "restartCount")}
            lines.append(f"pod {pod['metadata']['name']}: {json.dumps(states)}")
    events = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", "type!=Normal", check=False
    )  # fmt: skip
    lines.append(f"warnings: {events.out.strip() or 'none'}")
    logs = cluster.tflaunch("logs", name, "-n", namespace)
    for worker in (0, 1):
        lines += [f"[worker {worker}] {line}" for line in worker_lines(logs, worker)[-25:]]
    return "\n".join(lines)


def backup_saved(namespace: str) -> bool:
    """The chief's first epoch-end backup is on shared_claim's volume (its `checkpoint` index,
    which TensorFlow writes after the data). The epoch's log line comes first (the progress
    callback runs before the backup's), so a kill right after that line may find none."""
    volume = Path(node_sh("state")) / "volumes" / namespace
    return any(volume.glob("**/chief/checkpoint"))


def kill_worker_1_after_the_first_backup(cluster: ControlPlane, namespace: str) -> None:
    """Once the chief's first backup is on disk, SIGKILL worker 1's container through the
    node's containerd, as an OOM kill would (not a pod deletion: the pod stays)."""
    eventually(
        lambda: backup_saved(namespace), timeout=600, interval=1,
        what="the first epoch's checkpoint",
    )  # fmt: skip
    pod = cluster.kubectl(
        "get", "pods", "-n", namespace, "-l", "batch.kubernetes.io/job-completion-index=1",
        "-o", "jsonpath={.items[0].metadata.name}",
    ).out  # fmt: skip
    container = node_sh("crictl", "ps", "-q", "--label", f"io.kubernetes.pod.name={pod}")
    node_sh("crictl", "stop", "--timeout", "0", container)
