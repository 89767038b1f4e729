"""Pods that really run: containers started by containerd and runc on the real node, their
logs and exit codes read back through the API server, cluster DNS answering for a headless
Service's pods, TCP between two pods over the CNI bridge and through a Service's ClusterIP
(kube-proxy), the API server reached through the kubernetes Service, and the kubelet held to
a node's permissions by the Node authorizer and NodeRestriction."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ControlPlane, Run, eventually
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


def test_a_pod_reaches_a_peer_through_its_service_cluster_ip(
    real_node: ControlPlane, namespace: str, server: dict[str, Any]
) -> None:
    front = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "front"},
        "spec": {"selector": {"app": "peer"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    real_node.apply(front, namespace)
    address = real_node.get("service", "front", "-n", namespace)["spec"]["clusterIP"]
    command = f"echo ping | nc -w 10 front.{namespace}.svc.cluster.local 80"
    real_node.apply(real_pod("client", command), namespace)

    pod = finished(real_node, namespace, "client")

    log = real_node.kubectl("logs", "client", "-n", namespace).out
    assert pod["status"]["phase"] == "Succeeded", log
    assert log == "pong\n"
    assert address not in (server["status"]["podIP"], "None")


def test_a_pod_reaches_the_api_server_through_the_kubernetes_service(
    real_node: ControlPlane, namespace: str
) -> None:
    """What an in-cluster client (the operator's pod) does: TCP to the address the kubelet
    puts in KUBERNETES_SERVICE_HOST/PORT, which kube-proxy forwards to the API server."""
    command = "echo | nc -w 10 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT && echo connected"
    real_node.apply(real_pod("in-cluster", command), namespace)

    pod = finished(real_node, namespace, "in-cluster")

    log = real_node.kubectl("logs", "in-cluster", "-n", namespace).out
    assert pod["status"]["phase"] == "Succeeded", log
    assert log.endswith("connected\n"), log


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


def kubelet_kubectl(real_node: ControlPlane, *args: str) -> Run:
    """kubectl with the kubelet's own credentials (system:node:NODE_NAME)."""
    kubeconfig = Path(node_sh("state")) / "kubelet.kubeconfig"
    return real_node.kubectl("--kubeconfig", str(kubeconfig), *args, check=False)


def test_the_node_is_tainted_and_labelled_for_real_pods_only(real_node: ControlPlane) -> None:
    node = real_node.get("node", NODE_NAME)

    taints = [(t["key"], t["value"], t["effect"]) for t in node["spec"].get("taints", [])]
    assert (REAL_NODE, "true", "NoSchedule") in taints
    assert node["metadata"]["labels"][REAL_NODE] == "true"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2.")


def test_the_node_authorizer_limits_the_kubelet_to_its_own_objects(
    real_node: ControlPlane,
) -> None:
    other = kubelet_kubectl(real_node, "get", "node", "kwok-cpu-0")
    secrets = kubelet_kubectl(real_node, "get", "secrets", "-n", "kube-system")
    own = kubelet_kubectl(real_node, "get", "node", NODE_NAME)

    assert other.code != 0 and "cannot read 'kwok-cpu-0', only its own Node object" in other.err
    assert secrets.code != 0 and f"system:node:{NODE_NAME}" in secrets.err
    assert own.code == 0, own


def test_node_restriction_keeps_the_kubelet_from_restricted_labels(
    real_node: ControlPlane,
) -> None:
    label = "node-restriction.kubernetes.io/stolen"

    run = kubelet_kubectl(real_node, "label", "node", NODE_NAME, f"{label}=yes")

    assert run.code != 0 and f"is not allowed to modify labels: {label}" in run.err, run
    assert label not in real_node.get("node", NODE_NAME)["metadata"]["labels"]
