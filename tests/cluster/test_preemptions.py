"""Counting a job's preemptions from its pods (pure): events, not pods; the saved step from
the termination message; what `status`, `wait` and `-o json` make of it."""

from __future__ import annotations

import datetime
from typing import Any

from launcher.cli import output
from launcher.cluster import preemptions, status
from launcher.core import contract
from tests.cli.test_output import validate
from tests.cluster.conftest import job_objects

T0 = datetime.datetime(2026, 11, 30, 12, 0, 0, tzinfo=datetime.timezone.utc)


def _at(seconds: float) -> str:
    return (T0 + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    index: int,
    name: str,
    *,
    exit_code: int | None = 79,
    finished: float = 0,
    created: float | None = None,
    step: int | None = None,
    grace: int | None = None,
) -> dict[str, Any]:
    """A worker pod of an Indexed Job; terminated with `exit_code` at T0 + `finished` s."""
    state: dict[str, Any] = {"running": {}}
    phase = "Running"
    if exit_code is not None:
        phase = "Succeeded" if exit_code == 0 else "Failed"
        state = {"terminated": {"exitCode": exit_code, "finishedAt": _at(finished)}}
        if step is not None:
            state["terminated"]["message"] = (
                f"preempted: every worker saved at step {step} (epoch 2, step 30 of 40); "
                "exiting 79 so that the group restarts and resumes there"
            )
    spec: dict[str, Any] = {"containers": [{"name": "trainer"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": _at(finished - 60 if created is None else created),
            "labels": {"batch.kubernetes.io/job-completion-index": str(index)},
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "spec": spec,
        "status": {"phase": phase, "containerStatuses": [{"name": "trainer", "state": state}]},
    }


def test_every_worker_exiting_79_at_one_step_is_one_preemption() -> None:
    pods = [
        pod(0, "w-0-a", finished=0, step=640),
        pod(1, "w-1-a", finished=4, step=640),
        pod(0, "w-0-b", exit_code=None, created=5),
        pod(1, "w-1-b", exit_code=None, created=5),
    ]

    found = preemptions.summarize(pods)

    assert (found.count, found.resumed_at_step, found.last) == (1, 640, T0)
    assert found.words() == "preempted 1x, resumed at step 640 (not a failure: no retry used)"


def test_two_preemptions_are_told_apart_by_their_saved_step_even_close_in_time() -> None:
    pods = [
        pod(0, "a0", finished=0, step=100),
        pod(1, "a1", finished=1, step=100),
        pod(0, "b0", finished=10, step=640),  # within the 30 s grace, but another step
        pod(1, "b1", finished=11, step=640),
    ]

    found = preemptions.summarize(pods)

    assert (found.count, found.resumed_at_step) == (2, 640)
    assert found.last == T0 + datetime.timedelta(seconds=10)


def test_without_a_message_exits_within_the_grace_period_are_one_preemption() -> None:
    # kwok (or a program that writes no termination message): only the time tells.
    pods = [
        pod(0, "a0", finished=0, grace=5),
        pod(1, "a1", finished=3, grace=5),
        pod(1, "b1", finished=20, grace=5),
        pod(0, "c0", finished=40, grace=5),
    ]

    found = preemptions.summarize(pods)

    assert (found.count, found.resumed_at_step) == (3, None)
    assert found.short() == "preempted 3x, resumed from the last checkpoint"


def test_the_same_step_saved_twice_apart_in_time_is_two_preemptions() -> None:
    # Preempted again before a step was taken (e.g. while restoring): same step, later exit.
    pods = [pod(0, "a0", finished=0, step=70), pod(0, "b0", finished=120, step=70)]

    assert preemptions.summarize(pods).count == 2


def test_failures_and_successes_are_not_preemptions() -> None:
    pods = [
        pod(0, "a0", exit_code=1),
        pod(1, "a1", exit_code=78),
        pod(0, "b0", exit_code=0),
        pod(1, "b1", exit_code=None),
    ]

    found = preemptions.summarize(pods)

    assert found == preemptions.Preemptions()
    assert found.words() == "" and found.short() == ""


def test_the_saved_step_is_read_from_the_termination_message() -> None:
    assert contract.saved_step("preempted: every worker saved at step 70 (epoch 2)") == 70
    assert contract.saved_step("Error: out of memory") is None
    assert contract.saved_step(None) is None


def test_a_worker_s_restarts_count_its_failures_and_not_its_preemptions() -> None:
    pods = [
        pod(1, "a1", finished=0, created=-60),
        pod(1, "b1", finished=30, created=1),
        pod(1, "c1", exit_code=1, finished=60, created=31),  # a failure, then replaced
        pod(1, "d1", exit_code=79, finished=90, created=61),  # newest: not replaced yet
        pod(0, "a0", exit_code=None, created=-60),
    ]

    summary = status.summarize("mnist", "default", [job_objects()[-1]], pods)

    assert [(w.index, w.restarts) for w in summary.workers] == [(0, 0), (1, 1)]
    assert summary.restarts == summary.status.restarts == 1


def test_status_wait_and_the_document_say_the_preemptions() -> None:
    job = job_objects()[-1]
    pods = [
        pod(0, "mnist-worker-0-a", finished=0, step=640),
        pod(1, "mnist-worker-1-a", finished=2, step=640),
        pod(0, "mnist-worker-0-b", exit_code=None, created=3),
        pod(1, "mnist-worker-1-b", exit_code=None, created=3),
    ]

    summary = status.summarize("mnist", "default", [job], pods)

    text = output.status_text(summary, T0 + datetime.timedelta(minutes=5))
    assert text.splitlines()[1] == (
        "preempted 1x, resumed at step 640 (not a failure: no retry used)"
    )
    line = status.progress_line(summary, 65)
    assert "preempted 1x, resumed at step 640" in line
    document = output.job_document(summary)
    validate(document)
    body = document["status"]
    assert (body["preemptions"], body["resumedAtStep"]) == (1, 640)
    assert body["lastPreemptionTime"] == "2026-11-30T12:00:00Z"
    assert body["operator"] is None
    assert [w["pod"] for w in body["workers"]] == ["mnist-worker-0-b", "mnist-worker-1-b"]
    assert summary.restarts == 0, "a pod replaced after a preemption is not a restart"
    assert "no restarts" in line


def test_a_job_never_preempted_says_nothing_about_it() -> None:
    job = job_objects()[-1]
    pods = [pod(0, "w0", exit_code=None), pod(1, "w1", exit_code=None)]

    summary = status.summarize("mnist", "default", [job], pods)

    assert "preempt" not in output.status_text(summary, T0)
    assert "preempt" not in status.progress_line(summary, 1)
    assert output.job_document(summary)["status"]["preemptions"] == 0
