"""A Kueue job trains in containers: Kueue's manager (hack/kueue.sh up) admits `tflaunch submit
--set spec.gang=kueue` of examples/mnist.yaml on the real node, resumes its Job, and the two
workers train to Succeeded under the same `--wait`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import ControlPlane
from tests.e2e.test_kueue import running_kueue
from tests.node.conftest import NODE_NAME
from tests.node.test_mnist import real_node_spec

pytestmark = [pytest.mark.node, pytest.mark.slow]


@pytest.fixture
def queued_namespace(real_node: ControlPlane) -> Iterator[str]:
    """A namespace with LocalQueue `team` on hack/kueue.sh's ClusterQueue `tflaunch` (every
    namespace; its CPU and memory quota covers the real node's small requests)."""
    with running_kueue(real_node, pods_ready="5m"):
        name = f"kueue-{uuid.uuid4().hex[:5]}"
        real_node.kubectl("create", "namespace", name)
        real_node.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "team", "namespace": name},
                "spec": {"clusterQueue": "tflaunch"},
            }
        )
        try:
            yield name
        finally:
            real_node.tflaunch("delete", "mnist", "-n", name, "--timeout", "120s")
            real_node.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.timeout(1200)
def test_a_job_kueue_admits_trains_to_succeeded_on_the_real_node(
    real_node: ControlPlane, trainer_image: str, queued_namespace: str, tmp_path: Path
) -> None:
    ns = queued_namespace
    spec = real_node_spec(tmp_path / "mnist.yaml", ns, trainer_image, "indexed")

    run = real_node.tflaunch(
        "submit", str(spec), "--workers", "2", "--set", "spec.gang=kueue",
        "--set", "spec.queueName=team", "--wait", "--timeout", "15m", timeout=1000,
    )  # fmt: skip

    assert run.code == 0, run
    assert "job mnist succeeded" in run.out + run.err, run
    (workload,) = real_node.get("workloads", "-n", ns)["items"]
    conditions = {c["type"]: c["status"] for c in workload["status"]["conditions"]}
    assert conditions.get("Admitted") == "True" and conditions.get("Finished") == "True", conditions
    status = real_node.tflaunch("status", "mnist", "-n", ns, "-o", "json")
    job = json.loads(status.out)["status"]
    assert [(w["phase"], w["exitCode"]) for w in job["workers"]] == [("Succeeded", 0)] * 2
    assert {w["node"] for w in job["workers"]} == {NODE_NAME}, status.out
