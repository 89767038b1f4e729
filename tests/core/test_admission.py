"""Kueue's Workloads read into tflaunch's words: why a job waits, and how often Kueue evicted it."""

from __future__ import annotations

from typing import Any

from launcher.core import admission


def _job(uid: str, suspended: bool, queue: str | None = "team") -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {"metadata": {"uid": uid, "labels": labels}, "spec": {"suspend": suspended}}


def _workload(uid: str, *conditions: dict[str, str], evictions: Any = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conditions)}
    if evictions is not None:
        status["schedulingStats"] = {"evictions": evictions}
    return {"metadata": {"name": f"job-{uid}", "labels": {admission.JOB_UID_LABEL: uid}},
            "status": status}  # fmt: skip


def test_only_queued_jobs_have_workloads_to_read_and_only_suspended_ones_are_held():
    jobs = [_job("a", True), _job("b", False), _job("c", True, queue=None)]
    assert [j["metadata"]["uid"] for j in admission.queued(jobs)] == ["a", "b"]
    assert [j["metadata"]["uid"] for j in admission.held(jobs)] == ["a"]


def test_a_held_job_waits_in_kueues_words_and_an_admitted_one_does_not():
    full = {"type": "QuotaReserved", "status": "False", "message": "insufficient\n quota"}
    assert admission.waiting([_job("a", True)], [_workload("a", full)]) == (
        "waiting for Kueue admission in queue team: insufficient quota"
    )
    admitted = {"type": "Admitted", "status": "True"}
    assert admission.waiting([_job("a", True)], [_workload("a", admitted)]) is None
    assert admission.waiting([_job("a", True)], None) is None  # not readable: nothing said


def test_evictions_are_counted_per_reason_over_every_workload_of_the_job():
    workloads = [
        _workload("a", evictions=[{"reason": "Preempted", "underlyingCause": "", "count": 2}]),
        _workload(
            "b",
            evictions=[
                {"reason": "Preempted", "underlyingCause": "InCohortReclamation", "count": 1},
                {"reason": "PodsReadyTimeout", "underlyingCause": "", "count": 1},
            ],
        ),
        _workload("c"),
    ]
    assert admission.evictions(workloads) == {"PodsReadyTimeout": 1, "Preempted": 3}
    assert admission.evictions([]) == {}


def test_evictions_are_said_as_a_queueing_not_a_restart():
    assert admission.describe_evictions({"Preempted": 1}) == (
        "evicted by Kueue once (Preempted): its pods were removed and it queued again, "
        "resuming from its last save (not a restart)"
    )
    said = admission.describe_evictions({"PodsReadyTimeout": 1, "Preempted": 2})
    assert said.startswith("evicted by Kueue 3 times (PodsReadyTimeout 1, Preempted 2): ")
    assert admission.describe_evictions({}) == ""
