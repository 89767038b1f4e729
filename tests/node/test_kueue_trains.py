"""Kueue jobs train in containers: Kueue's manager (hack/kueue.sh up) admits `tflaunch submit
--set spec.gang=kueue` of examples/mnist.yaml on the real node, resumes its Job, and the two
workers train to Succeeded under the same `--wait`. A higher-priority job preempts a training
one through Kueue: the preempted workers save at the step they reached (SIGTERM, exit 79),
and when Kueue readmits their job it resumes from that step with no retry used."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import ControlPlane, eventually, stop_process
from tests.e2e.test_kueue import _lines_of, own_queue, running_kueue
from tests.node import jobs
from tests.node.conftest import NODE_NAME
from tests.node.jobs import real_node_spec, worker_lines

pytestmark = [pytest.mark.node, pytest.mark.slow]

RESUMED = r"at step (?P<step>\d+) \(epoch \d+, step [1-9]\d*\)"
"""The trainer's resume line after a save inside an epoch (an epoch-end backup says `step 0`)."""

# the fixtures of tests/node/jobs.py, here too: a fresh namespace and a claim on the node's disk.
namespace = jobs.namespace
shared_claim = jobs.shared_claim


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


@pytest.fixture
def one_job_queue(real_node: ControlPlane, namespace: str) -> Iterator[str]:
    """LocalQueue `team` in `namespace` on a ClusterQueue of its own whose CPU and memory
    quota holds one real-node MNIST job (2 workers x 250m, 1Gi) but not two, and whose
    higher-priority workloads preempt lower ones."""
    with running_kueue(real_node, pods_ready="5m"):
        real_node.apply(
            [
                *own_queue(namespace, {"cpu": "750m", "memory": "3Gi"}),
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": f"urgent-{namespace}"},
                    "value": 1000,
                },
            ]
        )
        try:
            yield "team"
        finally:
            for name in ("low", "high"):
                real_node.tflaunch("delete", name, "-n", namespace, "--timeout", "120s")
            real_node.kubectl("delete", "clusterqueue", namespace, "--ignore-not-found")
            real_node.kubectl(
                "delete", "priorityclass", f"urgent-{namespace}", "--ignore-not-found"
            )


def queued_spec(path: Path, namespace: str, image: str, name: str, **spec: Any) -> Path:
    real_node_spec(path, namespace, image, "indexed")
    document = yaml.safe_load(path.read_text())
    document["metadata"]["name"] = name
    document["spec"].update(gang="kueue", queueName="team", **spec)
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.timeout(1500)
def test_a_job_preempted_through_kueue_saves_where_it_was_and_resumes_there_without_a_retry(
    real_node: ControlPlane,
    trainer_image: str,
    namespace: str,
    shared_claim: str,
    one_job_queue: str,
    tmp_path: Path,
) -> None:
    ns = namespace
    low = queued_spec(
        tmp_path / "low.yaml", ns, trainer_image, "low", backoffLimit=0,
        trainer={"epochs": 2, "globalBatchSize": 64}, checkpoint={"claimName": shared_claim},
    )  # fmt: skip
    # The urgent job comes at the low one's first progress line, with two epochs of 937 steps
    # (batch 64) still ahead: far longer than its submission and Kueue's preemption take.
    # Submitted after the first epoch of 234-step epochs instead, the low job twice finished
    # (14 s) before the preemption reached it, and nothing was left to preempt.
    high = queued_spec(
        tmp_path / "high.yaml", ns, trainer_image, "high", priorityClassName=f"urgent-{ns}",
        trainer={"epochs": 1, "stepsPerEpoch": 5},
    )  # fmt: skip
    assert real_node.tflaunch("submit", str(low), "--workers", "2").code == 0

    def training() -> bool:
        logs = real_node.tflaunch("logs", "low", "-n", ns)
        return any(line.startswith("TFLAUNCH_PROGRESS ") for line in worker_lines(logs, 0))

    eventually(training, timeout=900, interval=2, what="the low job's first progress line")
    follower = real_node.popen_tflaunch("wait", "low", "-n", ns, "--timeout", "12m")
    try:
        lines = _lines_of(follower)
        urgent = real_node.tflaunch(
            "submit", str(high), "--workers", "2", "--wait", "--timeout", "10m", timeout=700
        )
        assert urgent.code == 0, urgent  # admitted by preempting the low job, and trained
        follower.wait(timeout=800)
    finally:
        stop_process(follower)

    said = "".join(lines)
    assert follower.returncode == 0, said  # the wait that followed it all along
    assert "low: waiting for Kueue admission in queue team: " in said and "Preempted: " in said
    assert "job low succeeded" in said and "restarted" not in said, said
    job = real_node.get("job", "low-worker", "-n", ns)
    assert not job["status"].get("failed"), job["status"]  # no retry used
    shown = real_node.tflaunch("status", "low", "-n", ns, "-o", "json")
    assert json.loads(shown.out)["status"]["kueueEvictions"] == {"Preempted": 1}, shown.out
    status = real_node.tflaunch("status", "low", "-n", ns)
    assert "evicted by Kueue once (Preempted): " in status.out, status
    logs = real_node.tflaunch("logs", "low", "-n", ns)
    for worker in (0, 1):
        resumed = [re.search(RESUMED, line) for line in worker_lines(logs, worker)
                   if "resuming from the backup" in line]  # fmt: skip
        # Saved where SIGTERM found it, inside an epoch: not an epoch-end backup.
        assert len(resumed) == 1 and resumed[0] is not None, logs.out
