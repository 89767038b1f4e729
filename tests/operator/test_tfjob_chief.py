"""A TFJob converted to a MultiWorkerJob (`tflaunch convert`) and applied to the operator: a
Chief is worker 0 of the group, with training-operator's TF_CONFIG in its own Job, and the
group restarts as a whole when a worker fails, the chief with it."""

from __future__ import annotations

import json
from typing import Any

from tests.operator.sim import Cluster, resource

CHIEF = {
    "layout": "per-worker",
    "workers": 3,
    "command": ["python", "/multi_worker_strategy-with-keras.py"],
    "tfConfig": {"chief": "chief", "environment": "cloud"},
}


def _converted() -> dict[str, Any]:
    """What `tflaunch convert` makes of a Chief and two Workers, as the API server stores it."""
    body = resource(CHIEF)
    del body["spec"]["trainer"]  # a TFJob runs its own program
    return body


def _tf_config(job: dict[str, Any]) -> dict[str, Any]:
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    return json.loads(next(e["value"] for e in env if e["name"] == "TF_CONFIG"))


def test_the_operator_gives_the_chief_its_own_job_and_task() -> None:
    cluster = Cluster(_converted())
    cluster.settle()
    configs = [_tf_config(cluster.jobs[f"mnist-worker-{i}"]) for i in range(3)]
    assert [c["task"] for c in configs] == [
        {"type": "chief", "index": 0},
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]
    assert {json.dumps(c["cluster"]) for c in configs} == {json.dumps(configs[0]["cluster"])}
    assert sorted(configs[0]["cluster"]) == ["chief", "worker"]
    assert {c["environment"] for c in configs} == {"cloud"}


def test_a_failed_worker_restarts_the_chief_with_the_group() -> None:
    cluster = Cluster(_converted())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.fail_worker(2)
    plan = cluster.reconcile()
    assert sorted(plan.delete_jobs) == ["mnist-worker-0", "mnist-worker-1", "mnist-worker-2"]
    cluster.settle()
    assert cluster.status.restarts == 1
    assert _tf_config(cluster.jobs["mnist-worker-0"])["task"] == {"type": "chief", "index": 0}


def test_under_success_policy_chief_the_chiefs_exit_0_succeeds_and_stops_the_others() -> None:
    cluster = Cluster({**_converted(), "spec": {**_converted()["spec"], "successPolicy": "chief"}})
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.finish_worker(0)
    plan = cluster.reconcile()
    assert cluster.status.phase == "Succeeded"
    assert cluster.status.message.startswith("the chief (worker 0) completed")
    assert sorted(plan.delete_jobs) == ["mnist-worker-1", "mnist-worker-2"]


def test_under_all_workers_the_chiefs_exit_0_alone_leaves_the_group_running() -> None:
    cluster = Cluster(_converted())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.finish_worker(0)
    cluster.settle()
    assert cluster.status.phase not in ("Succeeded", "Failed")
    assert sorted(cluster.jobs) == ["mnist-worker-0", "mnist-worker-1", "mnist-worker-2"]
