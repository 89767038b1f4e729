"""A TFJob under the operator (`tflaunch operator --tfjobs`): which it serves
(runPolicy.managedBy), the MultiWorkerJob it makes of one (owned by the TFJob, through the
same conversion as `tflaunch submit`), and the status a TFJob user reads."""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.core import labels
from launcher.operator import tfjobs

DATA = Path(__file__).parents[1] / "data" / "tfjob"
NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)


def _tfjob(path: str = "chief_worker_tfjob.yaml", managed_by: str | None = None) -> Any:
    body = yaml.safe_load((DATA / path).read_text())
    body["metadata"].update(namespace="team", uid="tfjob-uid", generation=1)
    if managed_by is not None:
        body["spec"]["runPolicy"]["managedBy"] = managed_by
    return body


@pytest.mark.parametrize(
    ("managed_by", "serve", "ours"),
    [
        (None, "all", True),
        (None, "managed", False),
        ("tflaunch.dev/operator", "managed", True),
        ("tflaunch.dev/operator", "all", True),
        ("kubeflow.org/training-operator", "all", False),
        ("kueue.x-k8s.io/multikueue", "all", False),
        ("tflaunch.dev/operator", "off", False),
    ],
)
def test_the_operator_serves_a_tfjob_by_its_managed_by(
    managed_by: str | None, serve: tfjobs.Serve, ours: bool
) -> None:
    assert tfjobs.served(_tfjob(managed_by=managed_by), serve) is ours


def test_a_tfjob_becomes_a_multiworkerjob_of_its_name_that_it_owns() -> None:
    plan = tfjobs.decide(_tfjob(), None, [], NOW)
    child = plan.apply
    assert child is not None
    assert (child["kind"], child["metadata"]["name"], child["metadata"]["namespace"]) == (
        "MultiWorkerJob",
        "multi-worker",
        "team",
    )
    (owner,) = child["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("TFJob", "tfjob-uid", True)
    spec = child["spec"]
    assert (spec["workers"], spec["layout"], spec["successPolicy"]) == (3, "per-worker", "chief")
    assert spec["tfConfig"] == {"chief": "chief", "environment": "cloud"}
    assert child["metadata"]["annotations"][tfjobs.GENERATION] == "1"


def test_the_multiworkerjob_is_applied_again_only_for_a_newer_tfjob_generation() -> None:
    resource = _tfjob()
    child = tfjobs.decide(resource, None, [], NOW).apply
    assert tfjobs.decide(resource, child, [], NOW).apply is None
    resource["metadata"]["generation"] = 2
    assert tfjobs.decide(resource, child, [], NOW).apply is not None


def test_a_tfjob_tflaunch_cannot_run_is_failed_naming_the_field_and_creates_nothing() -> None:
    resource = _tfjob()
    resource["spec"]["tfReplicaSpecs"]["PS"] = copy.deepcopy(
        resource["spec"]["tfReplicaSpecs"]["Worker"]
    )
    plan = tfjobs.decide(resource, None, [], NOW)
    assert plan.apply is None
    assert plan.status is not None
    (condition,) = plan.status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Failed",
        "True",
        "InvalidSpec",
    )
    assert condition["message"].startswith("spec.tfReplicaSpecs.PS: parameter servers")
    resource["status"] = plan.status
    assert tfjobs.decide(resource, None, [], NOW).status is None  # written once


def test_a_multiworkerjob_of_that_name_that_is_not_the_tfjobs_is_never_taken_over() -> None:
    someone = {"metadata": {"name": "multi-worker", "ownerReferences": []}}
    plan = tfjobs.decide(_tfjob(), someone, [], NOW)
    assert plan.apply is None
    assert plan.status is not None
    assert plan.status["conditions"][0]["reason"] == "NameConflict"


def _pod(index: int, phase: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"p{index}", "labels": {labels.WORKER_INDEX: str(index)}},
        "status": {"phase": phase},
    }


def test_the_tfjob_status_mirrors_the_conditions_current_last_and_counts_replicas() -> None:
    resource = _tfjob()
    child = tfjobs.decide(resource, None, [], NOW).apply
    assert child is not None
    child["status"] = {
        "phase": "Running",
        "startTime": "2030-01-01T00:00:00Z",
        "conditions": [
            {"type": "Created", "status": "True", "reason": "JobsCreated",
             "lastTransitionTime": "2030-01-01T00:00:00Z"},
            {"type": "Running", "status": "True", "reason": "AllWorkersReady",
             "lastTransitionTime": "2030-01-01T00:00:05Z"},
            {"type": "Restarting", "status": "False", "reason": "AllWorkersReady",
             "lastTransitionTime": "2030-01-01T00:00:05Z"},
        ],
    }  # fmt: skip
    pods = [_pod(0, "Running"), _pod(1, "Running"), _pod(2, "Failed")]
    status = tfjobs.decide(resource, child, pods, NOW).status
    assert status is not None
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("Restarting", "False"),
        ("Created", "True"),
        ("Running", "True"),
    ]
    assert status["replicaStatuses"] == {
        "Chief": {"active": 1, "succeeded": 0, "failed": 0},
        "Worker": {"active": 1, "succeeded": 0, "failed": 1},
    }
    assert status["startTime"] == "2030-01-01T00:00:00Z"
    resource["status"] = status
    assert tfjobs.decide(resource, child, pods, NOW).status is None  # nothing new to write


def test_a_worker_only_tfjob_counts_every_worker_as_worker() -> None:
    counts = tfjobs.replica_statuses(
        _tfjob("simple_tfjob.yaml"), [_pod(0, "Succeeded"), _pod(1, "Running")]
    )
    assert counts == {"Worker": {"active": 1, "succeeded": 1, "failed": 0}}
