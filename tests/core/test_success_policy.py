"""spec.successPolicy: allWorkers (every worker exits 0) or chief (worker 0 does, a TFJob's
default), read once from the Jobs (`reading.group_succeeded`) and from exit codes
(`reading.codes_succeeded`) for status/wait, the operator and local mode alike."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.core import group_status, labels, reading, tfjob
from launcher.core.errors import SpecError
from launcher.core.load import load_job
from launcher.core.render import render
from launcher.core.worker_end import GroupEnd

CHIEF = {labels.SUCCESS_POLICY: "chief"}


def _job(index: int, condition: str | None, at: str | None = None, chief: bool = True) -> Any:
    conditions = []
    if condition is not None:
        conditions.append({"type": condition, "status": "True", "lastTransitionTime": at})
    return {
        "metadata": {"name": f"j-worker-{index}", "annotations": CHIEF if chief else {}},
        "spec": {"template": {"metadata": {"labels": {labels.WORKER_INDEX: str(index)}}}},
        "status": {"conditions": conditions, **({"completionTime": at} if condition else {})},
    }


def _jobs(render_overrides: list[tuple[str, object]]) -> list[dict[str, Any]]:
    objects = render(load_job("examples/mnist.yaml", render_overrides))
    return [o for o in objects if o["kind"] == "Job"]


def test_all_workers_is_the_default_and_renders_no_job_success_policy() -> None:
    (job,) = _jobs([])
    assert "successPolicy" not in job["spec"]
    assert labels.SUCCESS_POLICY not in job["metadata"].get("annotations", {})


def test_chief_makes_the_indexed_job_succeed_when_index_0_does() -> None:
    (job,) = _jobs([("spec.successPolicy", "chief")])
    assert job["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert job["metadata"]["annotations"][labels.SUCCESS_POLICY] == "chief"


def test_chief_annotates_every_per_worker_job() -> None:
    jobs = _jobs([("spec.successPolicy", "chief"), ("spec.layout", "per-worker")])
    assert len(jobs) == 2
    assert {j["metadata"]["annotations"][labels.SUCCESS_POLICY] for j in jobs} == {"chief"}
    assert all("successPolicy" not in j["spec"] for j in jobs)  # only Indexed Jobs take one


def test_a_bad_success_policy_is_refused_naming_the_field() -> None:
    with pytest.raises(SpecError, match=r"spec\.successPolicy"):
        load_job("examples/mnist.yaml", [("spec.successPolicy", "ChiefOnly")])


def test_under_chief_the_chiefs_job_decides_while_a_worker_still_runs() -> None:
    jobs = [_job(0, "Complete", "2030-01-01T00:00:10Z"), _job(1, None)]
    assert reading.group_succeeded(jobs, workers=2)
    status = group_status.group_status(jobs, [], workers=2)
    assert (status.phase, status.message) == (
        "Succeeded",
        "the chief (worker 0) succeeded (successPolicy: chief)",
    )


def test_under_chief_a_worker_that_fails_after_the_chief_succeeded_changes_nothing() -> None:
    jobs = [_job(0, "Complete", "2030-01-01T00:00:10Z"), _job(1, "Failed", "2030-01-01T00:00:11Z")]
    assert group_status.group_status(jobs, [], workers=2).phase == "Succeeded"


def test_under_chief_a_worker_that_failed_before_the_chief_succeeded_fails_the_group() -> None:
    jobs = [_job(0, "Complete", "2030-01-01T00:00:10Z"), _job(1, "Failed", "2030-01-01T00:00:09Z")]
    assert not reading.group_succeeded(jobs, workers=2)
    assert group_status.group_status(jobs, [], workers=2).phase == "Failed"


def test_under_all_workers_the_chiefs_job_alone_is_not_success() -> None:
    jobs = [_job(0, "Complete", "2030-01-01T00:00:10Z", chief=False), _job(1, None, chief=False)]
    assert not reading.group_succeeded(jobs, workers=2)
    assert group_status.group_status(jobs, [], workers=2).phase != "Succeeded"


def test_under_chief_a_running_chief_with_a_finished_worker_is_not_success() -> None:
    jobs = [_job(0, None), _job(1, "Complete", "2030-01-01T00:00:10Z")]
    assert not reading.group_succeeded(jobs, workers=2)


@pytest.mark.parametrize(
    ("codes", "success", "done"),
    [
        ([0, None], "chief", True),
        ([0, 1], "chief", True),
        ([None, 0], "chief", False),
        ([0, None], "allWorkers", False),
        ([0, 0], "allWorkers", True),
    ],
)
def test_local_mode_reads_exit_codes_by_the_same_rule(
    codes: list[int | None], success: str, done: bool
) -> None:
    assert reading.codes_succeeded(codes, success) is done
    step = GroupEnd.of(codes).next_step(0, 3, success)
    assert (step == "done") is done


def test_a_tfjobs_default_success_policy_is_the_chiefs() -> None:
    document = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "t"},
        "spec": {
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "tensorflow", "image": "i", "command": ["python"]}
                            ]
                        }
                    },
                }
            }
        },
    }
    assert tfjob.to_multiworkerjob(document)["spec"]["successPolicy"] == "chief"
    document["spec"]["successPolicy"] = "AllWorkers"
    assert tfjob.to_multiworkerjob(document)["spec"]["successPolicy"] == "allWorkers"
