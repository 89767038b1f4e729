"""NetworkPolicy across nodes (issue 34): the policy tflaunch renders for a job, enforced on
kind by kube-router's network policy controller on every node (hack/kind.sh), proven with real
connections while the job's two workers, one on each kind worker node, train:

- a pod that is not the job's, on the other node from worker 0, is refused on each port the
  policy admits the job's workers to (TensorFlow's, and the restart-in-place control port);
- a pod carrying the job's worker labels, on that same node, connects to them: the policy
  admits the job's own workers wherever they run;
- with the policy deleted, the first pod connects to the same ports: the refusal was the
  policy's doing, not a closed port or a missing route, so without enforcement this test fails;
- the workers, which met each other through the policy, train to success.

A connection crosses nodes routed (no overlay), so the receiving node's FORWARD chain sees it:
that is where kube-router applies the policy of the pod it goes to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launcher.core import labels
from tests.e2e.conftest import eventually
from tests.kind.conftest import Kind, mnist_spec

pytestmark = pytest.mark.timeout(1500)  # image start, training, the probes: minutes

NAME = "netpol"
INDEX = labels.COMPLETION_INDEX  # the worker's index on the pods of the indexed layout

PROBE = """
import socket, sys
for port in sys.argv[2:]:
    try:
        socket.create_connection((sys.argv[1], int(port)), timeout=5).close()
        print(port, "open")
    except ConnectionRefusedError:
        print(port, "refused")
    except TimeoutError:
        print(port, "timeout")
    except OSError as error:
        print(port, type(error).__name__)
"""
"""Connects to each port and closes at once (the control port serves one peer at a time:
a probe must not hold it); prints `PORT OUTCOME` lines."""


def probe_pod(name: str, node: str, image: str, pod_labels: dict[str, str]) -> dict[str, Any]:
    """A pod that only sleeps on `node`, from which `connect` probes; the trainer image is
    already on every node (it has Python)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": pod_labels},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "900"],
                }
            ],
        },
    }


def connect(kind: Kind, namespace: str, pod: str, address: str, ports: list[int]) -> dict[int, str]:
    """What a connection from `pod` to each of `address`'s `ports` met: open, refused (a
    REJECT, or nothing listening), timeout (a DROP)."""
    run = kind.kubectl(
        "exec", pod, "-n", namespace, "--", "python", "-c", PROBE, address, *map(str, ports)
    )
    found = dict(line.split(" ", 1) for line in run.out.strip().splitlines())
    return {int(port): outcome for port, outcome in found.items()}


def selected(kind: Kind, node: str, address: str, policy: str) -> bool:
    """kube-router on `node` runs what goes to the pod at `address` through `policy`'s chain
    (it keeps a chain for every pod of its node; the jump to a policy's chain is there while
    the policy selects the pod)."""
    rules = kind.docker("exec", node, "iptables", "-t", "filter", "-S").out
    jump = f'--comment "run through nw policy {policy}"'
    return any(f"-d {address}/32 " in rule and jump in rule for rule in rules.splitlines())


def admitted(kind: Kind, node: str, address: str) -> bool:
    """The pod at `address` is a member of one of kube-router's ipsets on `node` (the pods
    that a policy's `from` admits)."""
    sets = kind.docker("exec", node, "ipset", "list").out
    return address in {line.split()[0] for line in sets.splitlines() if line.strip()}


def running(kind: Kind, namespace: str, pod: str) -> str | None:
    """The pod's IP once it runs."""
    status = kind.get("pod", pod, "-n", namespace)["status"]
    address: str | None = status.get("podIP")
    return address if status.get("phase") == "Running" and address else None


def test_a_pod_not_of_the_job_on_the_other_node_is_refused_while_the_workers_train(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    spec = mnist_spec(
        tmp_path / "job.yaml", NAME, namespace, kind.trainer,
        trainer={"epochs": 4, "stepsPerEpoch": 150, "globalBatchSize": 256},
        networkPolicy=True,
    )  # fmt: skip
    assert kind.tflaunch("submit", str(spec)).code == 0
    (policy,) = kind.get("networkpolicies", "-n", namespace)["items"]
    workers = labels.worker_selector(NAME)
    assert policy["spec"]["podSelector"]["matchLabels"] == workers, policy
    ports = [rule["port"] for rule in policy["spec"]["ingress"][0]["ports"]]

    def placed() -> dict[str, str] | None:  # worker index -> node, once both are scheduled
        pods = kind.get("pods", "-n", namespace, "-l", f"{labels.JOB_NAME}={NAME}")["items"]
        nodes = {p["metadata"]["labels"][INDEX]: p["spec"].get("nodeName") for p in pods}
        return nodes if len(nodes) == 2 and all(nodes.values()) else None

    nodes: dict[str, str] = eventually(placed, timeout=120, what="both workers scheduled")
    target, other = nodes["0"], nodes["1"]
    assert target != other, nodes
    for name, pod_labels in (("stranger", {}), ("peer", workers)):
        kind.apply(probe_pod(name, other, kind.trainer, pod_labels), namespace)

    chief = f"{INDEX}=0,{labels.JOB_NAME}={NAME}"

    def serving() -> str | None:  # worker 0's gRPC server up (the strategy started): its IP
        logs = kind.kubectl("logs", "-n", namespace, "-l", chief, "--tail=-1", check=False).out
        (pod,) = kind.get("pods", "-n", namespace, "-l", chief)["items"]
        return pod["status"].get("podIP") if "strategy ready" in logs else None

    address: str = eventually(serving, timeout=600, interval=2, what="worker 0's gRPC server")
    policy_name = policy["metadata"]["name"]
    eventually(lambda: selected(kind, target, address, policy_name), timeout=60,
               what=f"kube-router on {target} filtering worker 0 ({address})")  # fmt: skip
    eventually(lambda: running(kind, namespace, "stranger"), timeout=180, what="the stranger")
    peer = eventually(lambda: running(kind, namespace, "peer"), timeout=180, what="the peer")
    eventually(lambda: admitted(kind, target, peer), timeout=60,
               what=f"kube-router on {target} admitting the peer ({peer})")  # fmt: skip

    refused = connect(kind, namespace, "stranger", address, ports)
    admitted_peer = connect(kind, namespace, "peer", address, ports)
    kind.kubectl("delete", "networkpolicy", policy_name, "-n", namespace)
    eventually(lambda: not selected(kind, target, address, policy_name), timeout=60,
               what=f"kube-router on {target} no longer filtering worker 0")  # fmt: skip
    unfiltered = connect(kind, namespace, "stranger", address, ports)
    # The peer carries the workers' labels: gone before `wait` reads the job's pods.
    kind.kubectl("delete", "pods", "stranger", "peer", "-n", namespace, "--grace-period=0")

    assert refused == dict.fromkeys(ports, "refused"), (refused, nodes)
    assert admitted_peer == dict.fromkeys(ports, "open"), (admitted_peer, nodes)
    assert unfiltered == dict.fromkeys(ports, "open"), (unfiltered, nodes)
    wait = kind.tflaunch("wait", NAME, "-n", namespace, "--timeout", "15m", timeout=1000)
    assert wait.code == 0, wait
