"""A job Kueue holds back (spec.gang: kueue): no pod exists, so `status` and `wait` say why in
Kueue's own words, read from the Job's Workload (`launcher.core.admission`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from launcher.cluster import apply, status
from launcher.cluster.client import Cluster
from launcher.core import admission
from launcher.core.errors import ExitStatus
from tests.cluster.conftest import Result, job_objects
from tests.cluster.fakeapi import FakeKubernetes

Tflaunch = Callable[..., Result]
NO_QUOTA = (
    "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor "
    "default, previously considered podsets requests (0) + current podset request (6) > "
    "maximum capacity (4)"
)
WAITING = f"waiting for Kueue admission in queue team-a: {NO_QUOTA}"


def queued_job(uid: str = "uid-1", suspend: bool = True) -> dict[str, Any]:
    job = job_objects(spec__gang="kueue", spec__queueName="team-a")[-1]
    job["metadata"]["uid"] = uid
    job["spec"]["suspend"] = suspend
    return job


def workload(uid: str = "uid-1", **conditions: tuple[str, str, str]) -> dict[str, Any]:
    """A Workload as Kueue writes it for the Job of `uid`: conditions by type, each (status,
    reason, message)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "job-mnist-worker-1a2b3",
            "namespace": "default",
            "labels": {admission.JOB_UID_LABEL: uid},
        },
        "spec": {"queueName": "team-a", "active": True},
        "status": {
            "conditions": [
                {"type": kind, "status": s, "reason": reason, "message": message}
                for kind, (s, reason, message) in conditions.items()
            ]
        },
    }


PENDING = ("False", "Pending", NO_QUOTA)


def test_a_held_back_job_waits_in_its_queue_with_kueues_message() -> None:
    assert admission.waiting([queued_job()], [workload(QuotaReserved=PENDING)]) == WAITING


def test_the_message_is_one_line_however_kueue_wrapped_it() -> None:
    wrapped = ("False", "Pending", "couldn't assign flavors\n   to pod set main")
    words = admission.waiting([queued_job()], [workload(QuotaReserved=wrapped)])
    assert (
        words
        == "waiting for Kueue admission in queue team-a: couldn't assign flavors to pod set main"
    )


def test_an_admitted_or_resumed_job_is_not_waiting() -> None:
    admitted = workload(QuotaReserved=("True", "QuotaReserved", ""), Admitted=("True", "", ""))
    assert admission.waiting([queued_job()], [admitted]) is None
    assert admission.waiting([queued_job(suspend=False)], [workload(QuotaReserved=PENDING)]) is None


def test_another_jobs_workload_is_not_read_as_this_ones() -> None:
    words = admission.waiting([queued_job()], [workload(uid="other", QuotaReserved=PENDING)])
    assert words is not None and "Kueue has made no Workload for the Job yet" in words


def test_without_a_workload_it_asks_whether_kueue_runs() -> None:
    assert admission.waiting([queued_job()], []) == (
        "waiting for Kueue admission in queue team-a: Kueue has made no Workload for the Job "
        "yet (is Kueue running, with batch/job among its integrations?)"
    )


def test_an_evicted_workload_says_why_it_was_evicted_as_well() -> None:
    evicted = workload(
        QuotaReserved=PENDING,
        Evicted=("True", "PodsReadyTimeout", "Exceeded the PodsReady timeout default/x"),
    )
    assert admission.waiting([queued_job()], [evicted]) == (
        f"{WAITING} (evicted earlier: PodsReadyTimeout: Exceeded the PodsReady timeout default/x)"
    )


def test_an_evicted_workload_still_holding_its_quota_is_not_admitted_any_more() -> None:
    evicting = workload(
        QuotaReserved=("True", "QuotaReserved", ""),
        Admitted=("True", "Admitted", ""),
        Evicted=("True", "Preempted", "Preempted to accommodate a workload"),
    )
    assert admission.waiting([queued_job()], [evicting]) == (
        "waiting for Kueue admission in queue team-a: evicted (Preempted: Preempted to "
        "accommodate a workload); Kueue requeues it once its pods are gone"
    )


def test_a_deactivated_workload_says_so() -> None:
    off = workload(QuotaReserved=PENDING)
    off["spec"]["active"] = False
    words = admission.waiting([queued_job()], [off])
    assert words == (
        "waiting for Kueue admission in queue team-a: Workload job-mnist-worker-1a2b3 is "
        "deactivated (spec.active: false)"
    )


def test_unread_workloads_leave_the_plain_suspended_condition() -> None:
    summary = status.summarize("mnist", "default", [queued_job()], [], None)
    assert summary.state == "Suspended"
    assert summary.condition == "Suspended: the Job is suspended (e.g. queued by Kueue)"


def test_the_status_condition_is_the_admission_wait() -> None:
    summary = status.summarize(
        "mnist", "default", [queued_job()], [], [workload(QuotaReserved=PENDING)]
    )
    assert (summary.state, summary.condition) == ("Suspended", WAITING)


# --- Through the CLI, against the fake API server -------------------------------------------


@pytest.fixture
def held(cluster: Cluster, fake: FakeKubernetes) -> dict[str, Any]:
    """mnist submitted with gang: kueue (created suspended) and its Workload pending."""
    apply.apply_job(cluster, job_objects(spec__gang="kueue", spec__queueName="team-a"))
    job = fake.get("Job", "mnist-worker")
    assert job is not None and job["spec"]["suspend"] is True
    fake.put(workload(uid=job["metadata"]["uid"], QuotaReserved=PENDING))
    return job


def test_status_says_the_job_waits_for_admission(tflaunch: Tflaunch, held: dict[str, Any]) -> None:
    result = tflaunch("status", "mnist")

    assert result.code == 0, result
    assert result.out.splitlines()[-1] == f"condition: {WAITING}"


def test_wait_says_it_waits_for_admission_and_keeps_waiting(
    tflaunch: Tflaunch, held: dict[str, Any]
) -> None:
    result = tflaunch("wait", "mnist", "--timeout", "3")

    assert result.code == ExitStatus.TIMEOUT, result  # still waiting at the timeout, not failed
    assert f"mnist: {WAITING}\n" in result.err
    assert result.err.count("waiting for Kueue admission") == 1  # said once while unchanged


def test_status_without_kueues_crds_shows_the_plain_suspension(
    tflaunch: Tflaunch, fake: FakeKubernetes, held: dict[str, Any]
) -> None:
    fake.fail("GET", "/workloads$", 404, "the server could not find the requested resource")

    result = tflaunch("status", "mnist")

    assert result.code == 0, result
    assert result.out.splitlines()[-1] == (
        "condition: Suspended: the Job is suspended (e.g. queued by Kueue)"
    )


def test_jobs_kueue_does_not_hold_read_no_workloads(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.requests.clear()
    tflaunch("status", "mnist")
    assert not [r for r in fake.requests if r.path.endswith("/workloads")]
