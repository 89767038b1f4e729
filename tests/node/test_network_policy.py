"""The NetworkPolicy tflaunch renders, enforced (kube-router's network policy controller on the
real node, hack/node.sh) and proven with real connections while two workers train:

- the job's workers reach each other on the gRPC port (training succeeds with the policy on),
  and a pod carrying the job's worker labels connects to that port too;
- a pod of the same namespace without the job's labels, and a worker of another job, cannot;
- with denyMetadataEgress the workers cannot reach the metadata address 169.254.169.254 (a
  server there answers a pod without the policy) while DNS still resolves.

The metadata server is a network namespace of its own on this host, routed like a link-local
endpoint off the node: the pods' packets to it are forwarded, as to a cloud's."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import ControlPlane, eventually
from tests.node import jobs as mnist
from tests.node.conftest import real_pod
from tests.node.jobs import real_node_spec, worker_lines

pytestmark = [pytest.mark.node, pytest.mark.slow]

namespace = mnist.namespace  # tests/node/jobs.py's fixture

METADATA = "169.254.169.254"
NETNS = "tflaunch-metadata"
VETH = "tflaunch-md0"
PORT = 2222
API_PORT = 6443
"""Where an API server listens on a kubeadm cluster (a stand-in on the node here)."""


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=60)


@pytest.fixture
def metadata_server() -> Iterator[None]:
    """METADATA:80 answering `metadata` from a network namespace behind a veth pair."""
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)
    sh("ip", "netns", "add", NETNS)
    try:
        sh("ip", "link", "add", VETH, "type", "veth", "peer", "name", "md1", "netns", NETNS)
        sh("ip", "addr", "add", "169.254.169.253/30", "dev", VETH)
        sh("ip", "link", "set", VETH, "up")
        inside = ["ip", "netns", "exec", NETNS]
        sh(*inside, "ip", "addr", "add", f"{METADATA}/30", "dev", "md1")
        sh(*inside, "ip", "link", "set", "md1", "up")
        sh(*inside, "ip", "link", "set", "lo", "up")
        sh(*inside, "ip", "route", "add", "default", "via", "169.254.169.253")
        server = subprocess.Popen(
            [*inside, "busybox", "nc", "-ll", "-p", "80", "-e", "echo", "metadata"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            yield
        finally:
            server.kill()
            server.wait()
    finally:
        subprocess.run(["ip", "link", "del", VETH], capture_output=True)
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)


def enforced(address: str) -> bool:
    """kube-router has the pod at `address` in its rules: its own chain (a pod a policy
    selects) and the policies' ipsets. It programs a pod after it starts, so a connection in
    a new pod's first moments is not filtered yet (kube-network-policies closes that window
    with NRI); the probes wait for this, then connect."""
    chain = subprocess.run(
        ["iptables", "-t", "filter", "-S", "KUBE-ROUTER-FORWARD"], capture_output=True, text=True
    ).stdout
    sets = subprocess.run(["ipset", "list"], capture_output=True, text=True).stdout
    return f"-s {address}/32" in chain and f"\n{address} " in sets


def probe(cp: ControlPlane, namespace: str, name: str, command: str, labels: dict[str, str]) -> str:
    """`command` run in the probe pod `name` (with `labels`) once it runs and
    kube-router has it in its rules when a policy selects it: `open` or `blocked` last.
    kube-router rejects what a policy does not allow: nc says "Connection refused" first."""

    def running() -> str | None:
        status = cp.get("pod", name, "-n", namespace)["status"]
        address: str | None = status.get("podIP")
        return address if status.get("phase") == "Running" and address else None

    address: str = eventually(running, timeout=180, what=f"probe {name} running")
    if labels.get("tflaunch.dev/job-name") == "mnist":
        eventually(lambda: enforced(address), timeout=60, what=f"the policy on probe {name}")
    script = f"if {command}; then echo open; else echo blocked; fi 2>&1"
    return cp.kubectl("exec", name, "-n", namespace, "--", "sh", "-c", script).out


@pytest.mark.timeout(1200)
def test_the_rendered_policy_admits_only_the_jobs_workers_and_denies_metadata(
    real_node: ControlPlane,
    trainer_image: str,
    namespace: str,
    metadata_server: None,
    tmp_path: Path,
) -> None:
    cp = real_node
    spec = real_node_spec(tmp_path / "mnist.yaml", namespace, trainer_image, "indexed")
    document = yaml.safe_load(spec.read_text())
    document["spec"]["trainer"].update(epochs=3, stepsPerEpoch=150)
    document["spec"].update(networkPolicy=True, denyMetadataEgress=True)
    spec.write_text(yaml.safe_dump(document))
    assert cp.tflaunch("submit", str(spec)).code == 0

    def serving() -> bool:  # both workers' gRPC servers up: the strategy started
        logs = cp.tflaunch("logs", "mnist", "-n", namespace)
        return all(any("strategy ready" in line for line in worker_lines(logs, w)) for w in (0, 1))

    eventually(serving, timeout=600, interval=1, what="the workers' gRPC servers")
    chief = "tflaunch.dev/job-name=mnist,batch.kubernetes.io/job-completion-index=0"
    (pod,) = cp.get("pods", "-n", namespace, "-l", chief)["items"]
    address = pod["status"]["podIP"]
    connect = f"echo | nc -w 5 {address} {PORT} >/dev/null"  # gRPC answers in binary
    peer = f"mnist-worker-0.mnist.{namespace}.svc.cluster.local"
    worker = {"tflaunch.dev/job-name": "mnist", "app.kubernetes.io/component": "worker"}
    other = {"tflaunch.dev/job-name": "other", "app.kubernetes.io/component": "worker"}
    probes = {
        "same-job": (connect, worker),
        "no-labels": (connect, {}),
        "other-job": (connect, other),
        "metadata-allowed": (f"nc -w 5 {METADATA} 80", {}),
        "metadata-denied": (f"nc -w 5 {METADATA} 80", worker),
        "dns": (f"nslookup {peer}", worker),
    }

    for name, (_, labels) in probes.items():  # all at once: the workers are training
        cp.apply(real_pod(name, "sleep 600", labels=labels), namespace)
    seen = {name: probe(cp, namespace, name, *probes[name]) for name in probes}
    cp.kubectl("delete", "pods", *probes, "-n", namespace, "--wait=false", "--grace-period=0")
    last = {name: text.splitlines()[-1] for name, text in seen.items()}

    assert last["same-job"] == "open", seen
    assert last["no-labels"] == "blocked", seen
    assert last["other-job"] == "blocked", seen
    assert seen["metadata-allowed"] == "metadata\nopen\n", seen  # the server answers
    assert last["metadata-denied"] == "blocked", seen
    assert last["dns"] == "open" and address in seen["dns"], seen
    wait = cp.tflaunch("wait", "mnist", "-n", namespace, "--timeout", "15m", timeout=1000)
    assert wait.code == 0, wait  # the workers reached each other through the policy
    policy = cp.get("networkpolicy", "mnist-tf-peers", "-n", namespace)
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"], policy


@pytest.mark.timeout(1200)
def test_peers_egress_reaches_the_peer_dns_and_what_is_named_but_not_the_api_server_or_kubelet(
    real_node: ControlPlane,
    trainer_image: str,
    namespace: str,
    metadata_server: None,
    tmp_path: Path,
) -> None:
    """spec.egress: peers, with the metadata server's address named in egressTo: a pod with
    the job's worker labels reaches its peer's gRPC port, DNS and the named address, not the
    API server's port nor the kubelet's on the node; the same connections from a pod without
    the labels all open (the control).

    The API server is a stand-in on the node's 6443 (where kubeadm's listens): kwokctl's
    listens in 30000-32767, which kube-router lets every pod reach on its own node (its
    "allow LOCAL traffic to node ports" rule, before any policy), so this rig's own API
    server stays reachable whatever the policy says (docs/testing.md)."""
    cp = real_node
    spec = real_node_spec(tmp_path / "mnist.yaml", namespace, trainer_image, "indexed")
    document = yaml.safe_load(spec.read_text())
    document["spec"]["trainer"].update(epochs=3, stepsPerEpoch=150)
    named = [{"cidr": f"{METADATA}/32", "port": 80}]
    document["spec"].update(egress="peers", egressTo=named)
    spec.write_text(yaml.safe_dump(document))
    assert cp.tflaunch("submit", str(spec)).code == 0

    def serving() -> bool:
        logs = cp.tflaunch("logs", "mnist", "-n", namespace)
        return all(any("strategy ready" in line for line in worker_lines(logs, w)) for w in (0, 1))

    eventually(serving, timeout=600, interval=1, what="the workers' gRPC servers")
    chief = "tflaunch.dev/job-name=mnist,batch.kubernetes.io/job-completion-index=0"
    (pod,) = cp.get("pods", "-n", namespace, "-l", chief)["items"]
    node = cp.get("node", pod["spec"]["nodeName"])
    (node_ip,) = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    kubelet_port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    connections = {
        "peer": f"echo | nc -w 5 {pod['status']['podIP']} {PORT} >/dev/null",
        "api": f"nc -w 5 {node_ip} {API_PORT}",
        "kubelet": f"echo | nc -w 5 {node_ip} {kubelet_port} >/dev/null",
        "named": f"nc -w 5 {METADATA} 80",
        "dns": f"nslookup mnist-worker-0.mnist.{namespace}.svc.cluster.local",
    }
    worker = {"tflaunch.dev/job-name": "mnist", "app.kubernetes.io/component": "worker"}
    probes = {
        **{f"worker-{name}": (command, worker) for name, command in connections.items()},
        **{f"free-{n}": (command, {}) for n, command in connections.items() if n != "peer"},
    }  # a pod without the labels is not admitted to the peer's port (ingress): no control

    for name, (_, labels) in probes.items():
        cp.apply(real_pod(name, "sleep 600", labels=labels), namespace)
    server = subprocess.Popen(
        ["busybox", "nc", "-ll", "-p", str(API_PORT), "-e", "echo", "api"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        seen = {name: probe(cp, namespace, name, *probes[name]) for name in probes}
    finally:
        server.kill()
        server.wait()
    cp.kubectl("delete", "pods", *probes, "-n", namespace, "--wait=false", "--grace-period=0")
    last = {name: text.splitlines()[-1] for name, text in seen.items()}

    assert {n: last[f"worker-{n}"] for n in connections} == {
        "peer": "open", "api": "blocked", "kubelet": "blocked", "named": "open", "dns": "open",
    }, seen  # fmt: skip
    assert {n: last[f"free-{n}"] for n in connections if n != "peer"} == {
        "api": "open", "kubelet": "open", "named": "open", "dns": "open",
    }, seen  # fmt: skip
    wait = cp.tflaunch("wait", "mnist", "-n", namespace, "--timeout", "15m", timeout=1000)
    assert wait.code == 0, wait  # the workers trained through the egress policy
