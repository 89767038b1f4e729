"""Pods that really run: containers started by containerd and runc on the real node, their
logs and exit codes read back through the API server, cluster DNS answering for a headless
Service's pods, TCP between two pods over the CNI bridge, and the kubelet held to a node's
permissions by the Node authorizer and NodeRestriction."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ControlPlane, eventually
from tests.node.conftest import NODE_NAME, REAL_NODE, node_sh, real_pod

pytestmark = pytest.mark.node


@pytest.fixture
def namespace(real_node: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    base = request.node.name.removeprefix("test_").replace("_", "-")[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:5]}"
    real_node.kubectl("create", "namespace", name)
    yield name
    real_node.kubectl("delete", "namespace", name, "--wait=false", check=False)


def finished(cp: ControlPlane, namespace: str, pod: str, timeout: float = 180) -> dict[str, Any]:
    """The pod once it has Succeeded or Failed."""

    def done() -> dict[str, Any] | None:
        status: dict[str, Any] = cp.get("pod", pod, "-n", namespace)
        return status if status["status"].get("phase") in ("Succeeded", "Failed") else None

    result: dict[str, Any] = eventually(done, timeout=timeout, what=f"pod {pod} to finish")
    return result


def running(cp: ControlPlane, namespace: str, pod: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        status: dict[str, Any] = cp.get("pod", pod, "-n", namespace)
        conditions = status["status"].get("conditions", [])
        is_ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return status if is_ready else None

    result: dict[str, Any] = eventually(ready, timeout=180, what=f"pod {pod} Ready")
    return result


def test_a_container_runs_and_its_log_and_exit_code_come_back(
    real_node: ControlPlane, namespace: str
) -> None:
    real_node.apply(real_pod("hello", "echo hello from $(hostname) as $(id -u); exit 3"), namespace)

    pod = finished(real_node, namespace, "hello")

    assert pod["spec"]["nodeName"] == NODE_NAME
    state = pod["status"]["containerStatuses"][0]["state"]
    assert state["terminated"]["exitCode"] == 3
    assert pod["status"]["phase"] == "Failed"
    assert real_node.kubectl("logs", "hello", "-n", namespace).out == "hello from hello as 0\n"


@pytest.fixture
def server(real_node: ControlPlane, namespace: str) -> dict[str, Any]:
    """Pod `server` (hostname `server`, subdomain `peers`) answering `pong` on TCP 8080, and
    the headless Service `peers` that names it."""
    real_node.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "peers"},
            "spec": {
                "clusterIP": "None",
                "selector": {"app": "peer"},
                "ports": [{"name": "tcp", "port": 8080}],
            },
        },
        namespace,
    )
    pod = real_pod(
        "server",
        "while true; do echo pong | nc -l -p 8080; done",
        hostname="server",
        subdomain="peers",
        labels={"app": "peer"},
    )
    real_node.apply(pod, namespace)
    return running(real_node, namespace, "server")


def test_a_pod_resolves_a_peer_by_its_headless_service_hostname(
    real_node: ControlPlane, namespace: str, server: dict[str, Any]
) -> None:
    peer = f"server.peers.{namespace}.svc.cluster.local"
    real_node.apply(real_pod("client", f"nslookup {peer}"), namespace)

    pod = finished(real_node, namespace, "client")

    log = real_node.kubectl("logs", "client", "-n", namespace).out
    assert pod["status"]["phase"] == "Succeeded", log
    assert server["status"]["podIP"] in log


def test_two_pods_talk_tcp_over_the_bridge(
    real_node: ControlPlane, namespace: str, server: dict[str, Any]
) -> None:
    peer = f"server.peers.{namespace}.svc.cluster.local"
    real_node.apply(real_pod("client", f"echo ping | nc -w 10 {peer} 8080"), namespace)

    pod = finished(real_node, namespace, "client")

    log = real_node.kubectl("logs", "client", "-n", namespace).out
    assert pod["status"]["phase"] == "Succeeded", log
    assert log == "pong\n"
    assert pod["status"]["podIP"] != server["status"]["podIP"]


def test_a_pod_that_does_not_tolerate_the_real_node_lands_on_a_kwok_node(
    real_node: ControlPlane, namespace: str
) -> None:
    pod = real_pod("elsewhere", "true")
    del pod["spec"]["nodeSelector"], pod["spec"]["tolerations"]
    real_node.apply(pod, namespace)

    node = eventually(
        lambda: real_node.get("pod", "elsewhere", "-n", namespace)["spec"].get("nodeName"),
        what="pod elsewhere scheduled",
    )

    assert node != NODE_NAME
    labels = real_node.get("node", node)["metadata"]["labels"]
    assert labels.get("type") == "kwok"


def test_the_kubelet_is_held_to_a_nodes_permissions(real_node: ControlPlane) -> None:
    kubelet = Path(node_sh("state")) / "kubelet.kubeconfig"
    node = real_node.get("node", NODE_NAME)
    taints = [(t["key"], t["effect"]) for t in node["spec"].get("taints", [])]
    assert (REAL_NODE, "NoSchedule") in taints
    assert node["metadata"]["labels"][REAL_NODE] == "true"

    # Node authorizer: a node reads only what its own pods need, not the cluster's secrets.
    secrets = real_node.kubectl(
        "--kubeconfig", str(kubelet), "get", "secrets", "-n", "kube-system", check=False
    )
    assert secrets.code != 0
    assert "system:node:tflaunch-real-0" in secrets.err and "forbidden" in secrets.err
    # NodeRestriction: a node may not change another node.
    other = real_node.kubectl(
        "--kubeconfig", str(kubelet), "label", "node", "kwok-cpu-0", "stolen=yes", check=False
    )
    assert other.code != 0 and "forbidden" in other.err, other
    assert "stolen" not in json.dumps(real_node.get("node", "kwok-cpu-0")["metadata"]["labels"])
