"""A job the operator runs, in `status -o json|yaml` (status.operator) and `status -w`'s lines:
its MultiWorkerJob's phase, restarts, preemptions and progress, matching the schema."""

from __future__ import annotations

from typing import Any

from launcher.cli import operator_jobs, output
from launcher.cluster import status
from tests.cli.test_output import validate
from tests.cluster.conftest import job_objects
from tests.cluster.test_preemptions import pod


def resource(**status_fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tflaunch.dev/v1alpha1",
        "kind": "MultiWorkerJob",
        "metadata": {"name": "mnist", "namespace": "default"},
        "spec": {"workers": 2, "backoffLimit": 3},
        "status": status_fields,
    }


RUNNING = {
    "phase": "Running",
    "reason": "WorkersRunning",
    "message": "2/2 workers running",
    "workers": "2/2",
    "restarts": 1,
    "preemptions": 2,
    "resumedAtStep": 640,
    "lastPreemptionTime": "2026-11-30T12:00:00Z",
    "progress": {"epoch": 2, "epochs": 5, "step": 120, "steps": 469, "etaSeconds": 80.0,
                 "updated": "2026-11-30T12:01:00Z", "epochText": "2/5", "eta": "1m20s"},
}  # fmt: skip


def test_the_document_of_an_operator_job_carries_the_multiworkerjobs_status() -> None:
    job = job_objects()[-1]
    summary = status.summarize("mnist", "default", [job], [pod(0, "w0", exit_code=None)])

    document = output.job_document(operator_jobs.with_resource(summary, resource(**RUNNING)))

    validate(document)
    shown = document["status"]["operator"]
    assert shown["multiWorkerJob"] == "mnist"
    assert (shown["phase"], shown["restarts"], shown["backoffLimit"]) == ("Running", 1, 3)
    assert (shown["preemptions"], shown["resumedAtStep"]) == (2, 640)
    assert shown["progress"]["epoch"] == 2 and shown["progress"]["steps"] == 469
    assert output.dump(document, "yaml").count("operator:") == 1


def test_an_operator_job_without_jobs_or_status_yet_still_has_a_valid_document() -> None:
    summary = status.summarize("mnist", "default", [], [])

    document = output.job_document(operator_jobs.with_resource(summary, resource()))

    validate(document)
    assert document["spec"]["workers"] == 2
    shown = document["status"]["operator"]
    assert shown["phase"] is None and shown["progress"] is None and shown["result"] == {}


def test_the_watch_lines_change_with_the_phase_and_say_the_preemptions() -> None:
    created = operator_jobs.watch_lines(resource(phase="Created", reason="JobsCreated"))
    running = operator_jobs.watch_lines(resource(**RUNNING))

    assert created == {
        "operator": "multiworkerjob mnist: Created (JobsCreated), 0/? workers ready, "
        "restarts 0 of 3"
    }
    assert running["operator"].startswith(
        "multiworkerjob mnist: Running (WorkersRunning), 2/2 workers ready, restarts 1 of 3, "
        "preempted 2 times"
    )
    assert running["operator"].endswith("resumed at step 640")
    assert running["training"] == "multiworkerjob mnist: training epoch 2/5 step 120/469 ETA 1m20s"
