"""Kubeflow's own TFJob example runs unchanged on the real node:
tests/data/tfjob/multi_worker_tfjob.yaml (training-operator v1.9.0's
examples/tensorflow/distribution_strategy/multi_worker_tfjob.yaml, byte for byte), through
`tflaunch submit FILE --wait` and through `kubectl apply -f FILE` under the operator.

The manifest is left as it is; the cluster gives it what it asks, as an air-gapped GPU
cluster would:
- its image, kubeflow/tf-multi-worker-strategy:latest, built here FROM the trainer image with
  Kubeflow's program ported offline (tests/data/tfjob/Dockerfile; `hack/images.sh build
  tfjob-example`). `:latest` means imagePullPolicy Always, so the kubelet pulls it from
  docker.io, which is unreachable here: a registry on this machine (tests/node/registry.py)
  serves it, and containerd's hosts.toml names it docker.io's mirror;
- `nvidia.com/gpu: 1` per worker: the real node advertises 2 in its status (an extended
  resource; no device plugin, so no device is given to the container) and is, for the test,
  the cluster's one schedulable node (its taint lifted, the kwok nodes cordoned);
- the claim `strategy-volume`: a hostPath PersistentVolume on the node's disk.

Both workers run Kubeflow's program to its end (ten epochs, the chief's SavedModel and the
worker's on the claim), and each pod's TF_CONFIG, as the container got it (the OCI spec
containerd gave runc), is training-operator v1.9.3's for that pod bar the host names
(tests/data/tfjob/training_operator_pod_tf_configs.json)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.core.test_tfjob_tf_config import GOLDENS, _with_our_hosts
from tests.e2e.conftest import ROOT, ControlPlane, eventually
from tests.e2e.test_chart_install import Release, run_operator  # noqa: F401 (a fixture)
from tests.node.conftest import NODE_NAME, built_archive, node_sh
from tests.node.jobs import host_path_claim, succeeded_on_the_node, worker_lines
from tests.node.registry import Registry, mirrored

pytestmark = [pytest.mark.node, pytest.mark.slow]

MANIFEST = ROOT / "tests" / "data" / "tfjob" / "multi_worker_tfjob.yaml"
REPOSITORY = "kubeflow/tf-multi-worker-strategy"
GPU = "nvidia.com/gpu"
LAST_EPOCH = "Learning rate for epoch 10 is 9.999999747378752e-06"
"""What Kubeflow's program prints after its last epoch (decay(): 1e-5 from epoch 8)."""


@pytest.fixture(scope="module")
def registry(real_node: ControlPlane) -> Iterator[Registry]:
    """The example image served from this machine as docker.io's mirror for the node."""
    layout = built_archive("tfjob-example")
    certs_d = Path(node_sh("state")) / "certs.d"
    with mirrored(certs_d, "docker.io", "https://registry-1.docker.io", {REPOSITORY: layout}) as r:
        yield r


@pytest.fixture
def gpu_node(real_node: ControlPlane) -> Iterator[None]:
    """The real node as the cluster's one schedulable node, with `nvidia.com/gpu: 2` in its
    status; its taints, the kwok nodes' schedulability and its status restored after."""
    node = real_node.get("node", NODE_NAME)
    taints = node["spec"].get("taints") or []
    others = [n["metadata"]["name"] for n in real_node.get("nodes")["items"]]
    others.remove(NODE_NAME)
    gpus = {"capacity": {GPU: "2"}, "allocatable": {GPU: "2"}}
    real_node.kubectl("cordon", *others)
    real_node.kubectl("patch", "node", NODE_NAME, "--type=json", "-p",
                      json.dumps([{"op": "remove", "path": "/spec/taints"}]))  # fmt: skip
    real_node.kubectl("patch", "node", NODE_NAME, "--subresource=status", "--type=merge",
                      "-p", json.dumps({"status": gpus}))  # fmt: skip
    try:
        yield
    finally:
        gone = {part: {GPU: None} for part in gpus}
        real_node.kubectl("patch", "node", NODE_NAME, "--subresource=status", "--type=merge",
                          "-p", json.dumps({"status": gone}), check=False)  # fmt: skip
        real_node.kubectl("patch", "node", NODE_NAME, "--type=merge",
                          "-p", json.dumps({"spec": {"taints": taints}}), check=False)  # fmt: skip
        real_node.kubectl("uncordon", *others, check=False)


@pytest.fixture
def namespace(real_node: ControlPlane) -> Iterator[str]:
    name = f"kubeflow-{uuid.uuid4().hex[:5]}"
    real_node.kubectl("create", "namespace", name)
    yield name
    real_node.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def strategy_volume(real_node: ControlPlane, namespace: str) -> Iterator[Path]:
    """The claim the manifest mounts at /train; yields the volume's directory on the node."""
    claim = host_path_claim(real_node, namespace, "strategy-volume")
    next(claim)
    yield Path(node_sh("state")) / "volumes" / namespace
    next(claim, None)  # its clean-up


def _container_env(real_node: ControlPlane, pod: str) -> dict[str, str]:
    """The environment containerd gave the pod's container (its OCI spec, as runc ran it):
    TF_CONFIG with $(WORKER_INDEX) expanded by the kubelet."""
    (container,) = node_sh("crictl", "ps", "-a", "-q", "--label",
                           f"io.kubernetes.pod.name={pod}").split()  # fmt: skip
    spec = json.loads(node_sh("crictl", "inspect", container))["info"]["runtimeSpec"]
    return dict(entry.split("=", 1) for entry in spec["process"]["env"])


def _workers(real_node: ControlPlane, namespace: str) -> dict[int, dict[str, Any]]:
    pods = real_node.get("pods", "-n", namespace, "-l", "tflaunch.dev/job-name=multi-worker")
    index = "batch.kubernetes.io/job-completion-index"
    return {int(p["metadata"]["annotations"][index]): p for p in pods["items"]}


def _every_worker_ended(real_node: ControlPlane, namespace: str) -> bool:
    statuses = [
        s for p in _workers(real_node, namespace).values()
        for s in p["status"].get("containerStatuses") or []
    ]  # fmt: skip
    return len(statuses) == 2 and all("terminated" in s["state"] for s in statuses)


def ran_kubeflows_program(
    real_node: ControlPlane, namespace: str, registry: Registry, volume: Path
) -> None:
    """Both workers ran the example's own ENTRYPOINT to its end on the node, from the image
    the kubelet pulled through the mirror, with training-operator's TF_CONFIG."""
    assert registry.pulled(REPOSITORY), registry.requests
    eventually(lambda: _every_worker_ended(real_node, namespace), what="both workers' end")
    succeeded_on_the_node(real_node, namespace, "multi-worker")
    workers = _workers(real_node, namespace)
    for pod in workers.values():
        (container,) = pod["spec"]["containers"]
        assert (container["image"], container["imagePullPolicy"]) == (
            "kubeflow/tf-multi-worker-strategy:latest", "Always"
        ), container  # fmt: skip
        assert "command" not in container, container  # the image's ENTRYPOINT runs
        assert container["resources"]["limits"][GPU] == "1"
    logs = real_node.tflaunch("logs", "multi-worker", "-n", namespace)
    assert logs.code == 0, logs
    for worker in (0, 1):
        assert LAST_EPOCH in worker_lines(logs, worker), logs.out
    # The chief's SavedModel where Kubeflow's ENTRYPOINT puts it, the worker's beside it.
    assert (volume / "saved_model" / "saved_model.pb").is_file()
    assert (volume / "saved_model" / "worker_tmp_1" / "saved_model.pb").is_file()
    assert (volume / "checkpoint" / "ckpt_10.index").is_file()
    golden = GOLDENS[MANIFEST.name]
    for index, pod in sorted(workers.items()):
        config = _container_env(real_node, pod["metadata"]["name"])["TF_CONFIG"]
        expected = golden[f"worker-{index}"]
        assert expected is not None
        assert config == _with_our_hosts(expected, json.loads(config)), (index, config)


@pytest.mark.timeout(900)
def test_kubeflows_example_runs_unchanged_with_tflaunch_submit_wait(
    real_node: ControlPlane,
    registry: Registry,
    gpu_node: None,
    namespace: str,
    strategy_volume: Path,
) -> None:
    run = real_node.tflaunch(
        "submit", str(MANIFEST), "-n", namespace, "--wait", "--timeout", "10m", timeout=700
    )

    assert run.code == 0, run
    assert "job multi-worker succeeded" in run.out + run.err, run
    assert "spec.entrypoint: image runs the image's own ENTRYPOINT" in run.err, run
    ran_kubeflows_program(real_node, namespace, registry, strategy_volume)


def _tfjob_state(real_node: ControlPlane, namespace: str) -> str | None:
    found = real_node.kubectl("get", "tfjob", "multi-worker", "-n", namespace, "-o", "json")
    conditions = (json.loads(found.out).get("status") or {}).get("conditions") or []
    true = [c["type"] for c in conditions if c["status"] == "True"]
    return next((state for state in ("Succeeded", "Failed") if state in true), None)


@pytest.mark.timeout(900)
def test_kubeflows_example_runs_unchanged_with_kubectl_apply_under_the_operator(
    real_node: ControlPlane,
    registry: Registry,
    gpu_node: None,
    namespace: str,
    strategy_volume: Path,
    run_operator: Any,  # noqa: F811 (the fixture imported above)
) -> None:
    # The chart as a TFJob user installs it (tfjob.enabled); the operator runs as a local
    # process with the Deployment's args and the chart's ServiceAccount (tests/e2e's way),
    # so the Deployment runs no pod of its own.
    release = Release(real_node, namespace, "tfjob.enabled=true", "replicaCount=0",
                      "leaderElection=false")  # fmt: skip
    real_node.wait_established("tfjobs.kubeflow.org", "multiworkerjobs.tflaunch.dev")
    run_operator(release)

    real_node.kubectl("apply", "-n", namespace, "-f", str(MANIFEST))

    state = eventually(lambda: _tfjob_state(real_node, namespace), timeout=600, interval=5,
                       what="the TFJob Succeeded or Failed")  # fmt: skip
    assert state == "Succeeded", real_node.kubectl("get", "tfjob", "-n", namespace, "-o",
                                                   "yaml").out  # fmt: skip
    listed = real_node.kubectl("get", "tfjobs", "-n", namespace).out
    assert any(line.split()[:2] == ["multi-worker", "Succeeded"] for line in listed.splitlines())
    ran_kubeflows_program(real_node, namespace, registry, strategy_volume)
    release.run("uninstall", release.name)
