"""Reading a job's state from its Jobs and Pods: per worker, and the job's verdict."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest

from launcher.cli import output
from launcher.cluster import status
from tests.cluster.conftest import Result, job_objects
from tests.cluster.fakeapi import FakeKubernetes
from tests.cluster.objects import pod_for, with_active, with_condition

Tflaunch = Callable[..., Result]
UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def indexed_job(**overrides: Any) -> dict[str, Any]:
    return job_objects(**overrides)[-1]


def summary(jobs: list[dict[str, Any]], pods: list[dict[str, Any]]) -> status.JobStatus:
    return status.summarize("mnist", "default", jobs, pods)


def test_an_unschedulable_worker_is_pending_with_the_schedulers_message() -> None:
    job = indexed_job()
    pods = [pod_for(job, 0), pod_for(job, 1, phase="Pending", unschedulable=UNSCHEDULABLE)]

    result = summary([job], pods)

    assert result.state == "Running"
    assert result.running == 1
    pending = result.workers[1]
    assert (pending.phase, pending.node) == ("Pending", None)
    assert pending.reason == f"Unschedulable: {UNSCHEDULABLE}"


def test_an_image_pull_failure_is_the_pending_reason() -> None:
    job = indexed_job()
    pod = pod_for(job, 0, phase="Pending", waiting=("ImagePullBackOff", 'Back-off pulling "x"'))

    (worker, _) = summary([job], [pod]).workers

    assert worker.reason == 'ImagePullBackOff: Back-off pulling "x"'


def test_running_workers_have_no_reason_and_count_as_running() -> None:
    job = indexed_job()

    result = summary([job], [pod_for(job, 0, node="gpu-a"), pod_for(job, 1, node="gpu-b")])

    assert result.state == "Running"
    assert [(w.index, w.phase, w.node, w.reason) for w in result.workers] == [
        (0, "Running", "gpu-a", None),
        (1, "Running", "gpu-b", None),
    ]


def test_exit_code_78_is_a_config_error_and_fails_the_job_by_pod_failure_policy() -> None:
    message = "Container trainer for pod default/mnist-worker-1-a0 failed with exit code 78"
    job = with_condition(indexed_job(), "Failed", "PodFailurePolicy", message)
    pods = [pod_for(job, 0), pod_for(job, 1, phase="Failed", exit_code=78)]

    result = summary([job], pods)

    assert result.state == "Failed"
    assert result.workers[1].reason == "exited 78 (configuration error)"
    assert result.condition == f"Failed: PodFailurePolicy: {message}"
    assert status.failure_message(result) == (
        f"job mnist failed: Failed: PodFailurePolicy: {message}; "
        "worker 1 exited 78 (configuration error); not retried: a restart cannot fix it"
    )


def test_a_worker_failing_in_a_collective_after_its_peer_finished_is_read_as_divergence():
    """The reading `tflaunch local` and the operator make (`reading.Divergence`), from every
    pod of the job: here the Job replaced worker 0, whose new pod found no peer (exit 75)."""
    job = with_condition(indexed_job(), "Failed", "BackoffLimitExceeded", "backoff limit")
    first = pod_for(job, 0, phase="Failed", exit_code=1, age=120)
    first["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        "UnavailableError: Collective ops is aborted by: Error reported from "
        "/job:worker/task:1 (the program exited 1)"
    )
    pods = [first, pod_for(job, 0, attempt=1, phase="Failed", exit_code=75),
            pod_for(job, 1, phase="Succeeded")]  # fmt: skip

    message = status.failure_message(summary([job], pods))

    assert (
        "; worker 0 failed in a collective operation (UnavailableError) after worker 1 had "
        "finished the program (exit 0): the workers ran different collectives"
    ) in message, message
    shown = output.status_text(summary([job], pods), datetime.datetime.now(datetime.UTC))
    assert shown.splitlines()[-1].startswith("diverged: worker 0 failed in a collective"), shown
    healthy = summary([job], [pod_for(job, 0, phase="Failed", exit_code=1), pods[2]])
    assert healthy.divergence is None  # its own error, no peer's


def test_an_oom_killed_worker_says_so_with_its_memory_limit_and_the_fix() -> None:
    job = indexed_job()
    pod = pod_for(job, 0, phase="Failed", exit_code=137, reason="OOMKilled")
    (trainer,) = [c for c in pod["spec"]["containers"] if c["name"] == "trainer"]
    trainer.setdefault("resources", {}).setdefault("limits", {})["memory"] = "3Gi"

    (worker, _) = summary([job], [pod]).workers

    assert worker.reason == (
        "was OOMKilled (exit 137) at its memory limit 3Gi: raise spec.resources.limits.memory "
        "or lower spec.trainer.globalBatchSize"
    )
    assert worker.exit_code == 137


def test_failed_pods_of_an_index_are_its_restarts() -> None:
    job = indexed_job()
    pods = [
        pod_for(job, 0, attempt=0, phase="Failed", age=300),
        pod_for(job, 0, attempt=1, phase="Failed", age=200),
        pod_for(job, 0, attempt=2, age=100),
        pod_for(job, 1),
    ]

    result = summary([job], pods)

    assert [(w.index, w.pod, w.restarts) for w in result.workers] == [
        (0, "mnist-worker-0-a2", 2),
        (1, "mnist-worker-1-a0", 0),
    ]
    assert result.restarts == 2


def test_a_complete_job_succeeded() -> None:
    job = with_condition(indexed_job(), "Complete")
    pods = [pod_for(job, i, phase="Succeeded", exit_code=0) for i in range(2)]

    result = summary([job], pods)

    assert (result.state, result.condition, result.finished) == ("Succeeded", "Complete", True)


@pytest.mark.parametrize("reason", ["BackoffLimitExceeded", "DeadlineExceeded"])
def test_the_failed_conditions_reason_is_reported(reason: str) -> None:
    job = with_condition(indexed_job(), "Failed", reason, "Job has reached the limit")

    result = summary([job], [])

    assert result.condition == f"Failed: {reason}: Job has reached the limit"


def test_a_suspended_job_is_suspended_not_pending() -> None:
    job = with_condition(indexed_job(spec__suspend=True), "Suspended", "JobSuspended")

    assert summary([job], []).state == "Suspended"


def test_per_worker_jobs_succeed_only_when_every_one_completed() -> None:
    jobs = [o for o in job_objects(spec__layout="per-worker") if o["kind"] == "Job"]
    first_done = [with_condition(jobs[0], "Complete"), jobs[1]]
    all_done = [with_condition(j, "Complete") for j in jobs]

    assert summary(first_done, []).state == "Pending"
    assert summary(all_done, []).state == "Succeeded"


def test_per_worker_jobs_fail_when_any_one_fails() -> None:
    jobs = [o for o in job_objects(spec__layout="per-worker") if o["kind"] == "Job"]
    failed = [with_condition(jobs[0], "Complete"), with_condition(jobs[1], "Failed", "X", "y")]

    result = summary(failed, [])

    assert result.state == "Failed"
    assert result.condition == "Failed (Job mnist-worker-1): X: y"


def test_per_worker_pods_are_indexed_by_their_label() -> None:
    jobs = [o for o in job_objects(spec__layout="per-worker") if o["kind"] == "Job"]

    result = summary(jobs, [pod_for(jobs[1], 1)])

    assert result.layout == "per-worker"
    assert [(w.index, w.phase) for w in result.workers] == [(0, "Missing"), (1, "Running")]


def test_list_reads_the_state_from_jobs_alone() -> None:
    assert status.overview("mnist", "default", [with_active(indexed_job(), 2)]).state == "Running"
    assert status.overview("mnist", "default", [indexed_job()]).state == "Pending"


def test_status_prints_a_row_per_worker_and_the_condition(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(pod_for(job, 0, node="gpu-a", age=90))
    fake.put(pod_for(job, 1, phase="Pending", unschedulable=UNSCHEDULABLE, age=90))

    result = tflaunch("status", "mnist")

    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0].startswith("job mnist in namespace default: Running, 1/2 workers running")
    assert lines[1].split() == ["WORKER", "POD", "PHASE", "NODE", "RESTARTS", "AGE", "REASON"]
    assert lines[2].split()[:5] == ["0", "mnist-worker-0-a0", "Running", "gpu-a", "0"]
    assert lines[3].split()[:5] == ["1", "mnist-worker-1-a0", "Pending", "-", "0"]
    assert lines[2].split()[5].startswith("1m3")  # 90s old: kubectl's 1m30s
    assert lines[3].endswith(f"Unschedulable: {UNSCHEDULABLE}")


def test_status_shows_the_failed_condition(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(with_condition(job, "Failed", "BackoffLimitExceeded", "Job has reached the limit"))
    fake.put(pod_for(job, 0, phase="Failed", exit_code=1))

    result = tflaunch("status", "mnist")

    assert "exited 1" in result.out
    assert result.out.splitlines()[-1] == (
        "condition: Failed: BackoffLimitExceeded: Job has reached the limit"
    )


# --- issue 27 item 9: labels and counts anyone may write are bounded -----------------------

HUGE = "99999999999999999999999"


def _hostile_per_worker_job(index: str) -> dict[str, Any]:
    job = next(o for o in job_objects(spec__layout="per-worker") if o["kind"] == "Job")
    job["spec"]["template"]["metadata"]["labels"]["tflaunch.dev/worker-index"] = index
    return job


@pytest.mark.parametrize("index", [HUGE, "10000", "\u00b2", "\u0661"])
def test_a_hostile_worker_index_label_never_sets_the_worker_count(index: str) -> None:
    job = _hostile_per_worker_job(index)
    assert status._expected_workers([job], indexed=False) == 1


def test_list_and_status_of_a_job_with_a_hostile_index_finish_with_a_bounded_count() -> None:
    job = _hostile_per_worker_job(HUGE)
    (listed,) = status.overviews([job])
    assert listed.expected == 1
    pods = [pod_for(job, 0)]
    pods[0]["metadata"]["labels"]["tflaunch.dev/worker-index"] = HUGE
    assert summary([job], pods).expected == 1


def test_an_indexed_job_claiming_more_completions_than_a_job_may_have_is_capped() -> None:
    job = indexed_job()
    job["spec"]["completions"] = 10**23
    assert status._expected_workers([job], indexed=True) == 10_000
