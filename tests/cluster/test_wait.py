"""`tflaunch wait`: watches (no polling) until success (0), failure (3) or timeout (4)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from launcher.cluster import apply
from launcher.cluster.client import Cluster
from launcher.core.errors import ExitStatus
from tests.cluster.conftest import Result, job_objects
from tests.cluster.fakeapi import FakeKubernetes
from tests.cluster.objects import pod_for, with_condition

Tflaunch = Callable[..., Result]
Later = Callable[[float, Callable[[], Any]], None]
UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


@pytest.fixture
def later(fake: FakeKubernetes) -> Iterator[Later]:
    """Run a change in the cluster `delay` seconds after `wait` started watching. Counted
    from the first watch request, not from when the test scheduled it: on a loaded machine
    the command's start (importing the client) can take longer than the delay, and the
    change then came before `wait` had seen the state before it."""
    threads: list[threading.Thread] = []
    cancelled = threading.Event()

    def watching() -> bool:
        with fake.lock:
            return any(r.query.get("watch") == "true" for r in fake.requests)

    def run(delay: float, change: Callable[[], Any]) -> None:
        deadline = time.monotonic() + 60
        while not watching() and time.monotonic() < deadline and not cancelled.is_set():
            time.sleep(0.01)
        if not cancelled.wait(delay):
            change()

    def schedule(delay: float, change: Callable[[], Any]) -> None:
        thread = threading.Thread(target=run, args=(delay, change), daemon=True)
        thread.start()
        threads.append(thread)

    yield schedule
    cancelled.set()
    for thread in threads:
        thread.join()


@pytest.fixture
def running(running_job: dict[str, Any], fake: FakeKubernetes) -> dict[str, Any]:
    """mnist submitted, both workers running; returns its Job."""
    fake.requests.clear()  # what the waiting does is counted, not the submit's own reads
    return running_job


def lists(fake: FakeKubernetes, plural: str) -> int:
    return sum(
        1
        for r in fake.requests
        if r.method == "GET" and r.path.endswith(f"/{plural}") and "watch" not in r.query
    )


def test_waiting_ends_with_0_when_the_job_completes(
    tflaunch: Tflaunch, fake: FakeKubernetes, running: dict[str, Any], later: Later
) -> None:
    def complete() -> None:
        fake.put(pod_for(running, 0, phase="Succeeded", exit_code=0))
        fake.put(pod_for(running, 1, phase="Succeeded", exit_code=0))
        fake.put(with_condition(running, "Complete"))

    later(0.3, complete)

    result = tflaunch("wait", "mnist", "--timeout", "10")

    assert result.code == ExitStatus.SUCCESS
    assert "mnist: running, 2/2 workers running, no restarts" in result.err
    assert result.err.splitlines()[-1].startswith("job mnist succeeded in ")


def test_waiting_on_a_job_that_already_succeeded_says_how_long_the_job_ran(
    tflaunch: Tflaunch, fake: FakeKubernetes, running: dict[str, Any]
) -> None:
    fake.put(pod_for(running, 0, phase="Succeeded", exit_code=0))
    fake.put(pod_for(running, 1, phase="Succeeded", exit_code=0))
    done = with_condition(running, "Complete")
    done["status"].update(startTime="2030-01-01T00:00:00Z", completionTime="2030-01-01T00:00:34Z")
    fake.put(done)

    result = tflaunch("wait", "mnist", "--timeout", "10")

    assert result.code == ExitStatus.SUCCESS
    assert result.err.splitlines()[-1] == "job mnist succeeded in 34s"


def test_waiting_rides_out_429_and_503_from_the_api_server(
    tflaunch: Tflaunch, fake: FakeKubernetes, running: dict[str, Any], later: Later
) -> None:
    # The real server's outage is proven in tests/e2e; injected 429/5xx need the double.
    def overload() -> None:
        # Only once wait is watching both kinds (a server never reached fails at once).
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and {
            r.path.rpartition("/")[2] for r in fake.requests if r.query.get("watch") == "true"
        } != {"jobs", "pods"}:
            time.sleep(0.05)
        # Long enough for both streams' failures to overlap: one outage, one notice.
        fake.fail("GET", r"/pods$", 429, "storage is (re)initializing", times=3,
                  headers={"Retry-After": "1"})  # fmt: skip
        fake.fail("GET", r"/jobs$", 503, "etcd leader changed", times=5)
        fake.restart()  # ends the open watches: their renewals meet the failures

    later(0.0, lambda: (overload(), time.sleep(5), fake.put(with_condition(running, "Complete"))))

    result = tflaunch("wait", "mnist", "--timeout", "30")

    assert result.code == ExitStatus.SUCCESS, result.err
    notices = [line for line in result.err.splitlines() if "unavailable since" in line]
    assert len(notices) == 1, result.err
    assert "retrying until it is back" in notices[0]
    assert "the API server is back after" in result.err


def test_waiting_watches_instead_of_polling(
    tflaunch: Tflaunch, fake: FakeKubernetes, running: dict[str, Any], later: Later
) -> None:
    later(1.2, lambda: fake.put(with_condition(running, "Complete")))

    assert tflaunch("wait", "mnist", "--timeout", "10").code == 0

    assert (lists(fake, "jobs"), lists(fake, "pods")) == (1, 1), [
        (r.method, r.path, r.query) for r in fake.requests
    ]
    watches = [r for r in fake.requests if r.query.get("watch") == "true"]
    assert {r.path.rpartition("/")[2] for r in watches} == {"jobs", "pods"}
    assert all(r.query.get("resourceVersion") for r in watches)


def test_waiting_ends_with_3_naming_the_worker_that_failed_for_good(
    tflaunch: Tflaunch, fake: FakeKubernetes, running: dict[str, Any], later: Later
) -> None:
    message = "Container trainer for pod default/mnist-worker-1-a0 failed with exit code 78"

    def fail() -> None:
        fake.put(pod_for(running, 1, phase="Failed", exit_code=78))
        fake.put(with_condition(running, "Failed", "PodFailurePolicy", message))

    later(0.3, fail)

    result = tflaunch("wait", "mnist", "--timeout", "10")

    assert result.code == ExitStatus.JOB_FAILED
    assert result.err.splitlines()[-1] == (
        f"tflaunch: error: job mnist failed: Failed: PodFailurePolicy: {message}; "
        "worker 1 exited 78 (configuration error); not retried: a restart cannot fix it"
    )


def test_waiting_ends_with_4_after_the_timeout_and_says_the_job_keeps_running(
    tflaunch: Tflaunch, running: dict[str, Any]
) -> None:
    started = time.monotonic()

    result = tflaunch("wait", "mnist", "--timeout", "0.5")

    assert result.code == ExitStatus.TIMEOUT
    # A guard against waiting on after the deadline, not a speed measure (busy CI cores).
    assert time.monotonic() - started < 30
    line = result.err.splitlines()[-1]
    assert line.startswith("tflaunch: error: job mnist did not finish within 0s (mnist: running")
    assert line.endswith("it keeps running: tflaunch status mnist -n default")


def test_workers_pending_too_long_get_a_warning_about_gpus_and_gang_scheduling(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(pod_for(job, 0, age=300))
    fake.put(pod_for(job, 1, phase="Pending", unschedulable=UNSCHEDULABLE, age=300))

    result = tflaunch("wait", "mnist", "--timeout", "0.5", "--pending-warning", "120")

    assert result.code == ExitStatus.TIMEOUT
    (warning,) = [line for line in result.err.splitlines() if line.startswith("warning:")]
    assert warning.startswith(
        f"warning: worker 1 pending for more than 2m (Unschedulable: {UNSCHEDULABLE}). "
        "MultiWorkerMirroredStrategy cannot start until all 2 workers are scheduled"
    )
    assert "GPUs are short" in warning
    assert "gang scheduling" in warning
    assert "spec.gang: kueue, volcano or coscheduling" in warning


def test_a_restarted_worker_is_reported_while_waiting(
    tflaunch: Tflaunch, fake: FakeKubernetes, running: dict[str, Any], later: Later
) -> None:
    def restart() -> None:
        fake.put(pod_for(running, 0, phase="Failed", exit_code=1, age=60))
        fake.put(pod_for(running, 0, attempt=1, age=1))

    later(0.2, restart)
    later(0.6, lambda: fake.put(with_condition(running, "Complete")))

    result = tflaunch("wait", "mnist", "--timeout", "10")

    assert result.code == 0
    assert "mnist: worker 0 restarted (1 so far)" in result.err
    assert "restarts: worker 0 x1" in result.err


def test_a_worker_that_fails_after_a_preemption_is_reported_restarted(
    tflaunch: Tflaunch, fake: FakeKubernetes, running: dict[str, Any], later: Later
) -> None:
    def preempt_then_fail_then_run() -> None:  # a0 saved (79), a1 failed (1), a2 runs
        fake.put(pod_for(running, 0, phase="Failed", exit_code=79, age=90))
        fake.put(pod_for(running, 0, attempt=1, phase="Failed", exit_code=1, age=60))
        fake.put(pod_for(running, 0, attempt=2, age=1))

    later(0.2, preempt_then_fail_then_run)
    later(0.6, lambda: fake.put(with_condition(running, "Complete")))

    result = tflaunch("wait", "mnist", "--timeout", "10")

    assert result.code == 0, result
    assert "mnist: worker 0 restarted (1 so far)" in result.err  # the failure, not the 79


def test_per_worker_jobs_succeed_when_all_complete(
    tflaunch: Tflaunch, cluster: Cluster, fake: FakeKubernetes, later: Later
) -> None:
    apply.apply_job(cluster, job_objects(spec__layout="per-worker"))
    jobs = [fake.get("Job", f"mnist-worker-{i}") for i in range(2)]
    later(0.2, lambda: fake.put(with_condition(jobs[0], "Complete")))
    later(0.8, lambda: fake.put(with_condition(jobs[1], "Complete")))
    started = time.monotonic()

    result = tflaunch("wait", "mnist", "--timeout", "10")

    assert result.code == 0
    assert time.monotonic() - started >= 0.8


def test_per_worker_jobs_fail_when_one_fails(
    tflaunch: Tflaunch, cluster: Cluster, fake: FakeKubernetes, later: Later
) -> None:
    apply.apply_job(cluster, job_objects(spec__layout="per-worker"))
    job = fake.get("Job", "mnist-worker-1")
    later(0.2, lambda: fake.put(with_condition(job, "Failed", "BackoffLimitExceeded", "limit")))

    result = tflaunch("wait", "mnist", "--timeout", "10")

    assert result.code == ExitStatus.JOB_FAILED
    assert "Failed (Job mnist-worker-1): BackoffLimitExceeded: limit" in result.err


def test_an_expired_watch_lists_again_and_still_sees_the_outcome(
    tflaunch: Tflaunch, fake: FakeKubernetes, running: dict[str, Any], later: Later
) -> None:
    def restart_then_complete() -> None:
        fake.restart()  # ends the watches; resuming from their version gets 410 Gone
        fake.put(with_condition(running, "Complete"))

    later(0.3, restart_then_complete)

    result = tflaunch("wait", "mnist", "--timeout", "10")

    assert result.code == 0
    assert lists(fake, "jobs") >= 2


def test_waiting_for_a_job_that_does_not_exist_is_not_found(tflaunch: Tflaunch) -> None:
    result = tflaunch("wait", "ghost", "--timeout", "5")

    assert result.code == ExitStatus.ERROR
    assert "job ghost not found in namespace default" in result.err


def test_submit_with_wait_applies_then_waits(
    tflaunch: Tflaunch, fake: FakeKubernetes, later: Later
) -> None:
    def complete() -> None:
        job = fake.get("Job", "mnist-worker")
        if job is not None:
            fake.put(with_condition(job, "Complete"))

    later(0.5, complete)

    result = tflaunch("submit", "--wait", "--timeout", "10")

    assert result.code == 0
    assert "job.batch/mnist-worker created" in result.out
    assert "job mnist succeeded" in result.err


def test_a_preempted_worker_is_a_preemption_not_a_restart_while_waiting(
    tflaunch: Tflaunch, fake: FakeKubernetes, running: dict[str, Any], later: Later
) -> None:
    def preempt() -> None:
        for index in (0, 1):
            saved = pod_for(running, index, phase="Failed", exit_code=79, age=60)
            terminated = saved["status"]["containerStatuses"][0]["state"]["terminated"]
            terminated["message"] = "preempted: every worker saved at step 640 (epoch 2)"
            fake.put(saved)
            fake.put(pod_for(running, index, attempt=1, age=1))

    later(0.2, preempt)
    later(0.6, lambda: fake.put(with_condition(running, "Complete")))

    result = tflaunch("wait", "mnist", "--timeout", "10")

    assert result.code == 0, result
    said = "preempted 1x, resumed at step 640 (not a failure: no retry used)"
    assert f"mnist: {said}; the Job replaces the pods" in result.err
    assert "restarted" not in result.err
    assert result.err.splitlines()[-1].endswith(f"({said})")


def test_a_failure_after_a_preemption_says_the_preemption_apart_from_the_cause(
    tflaunch: Tflaunch, fake: FakeKubernetes, running: dict[str, Any], later: Later
) -> None:
    def preempt_then_fail() -> None:
        fake.put(pod_for(running, 1, phase="Failed", exit_code=79, age=60))
        fake.put(pod_for(running, 1, attempt=1, phase="Failed", exit_code=78, age=1))
        fake.put(with_condition(running, "Failed", "PodFailurePolicy", "exit 78"))

    later(0.3, preempt_then_fail)

    result = tflaunch("wait", "mnist", "--timeout", "10")

    assert result.code == ExitStatus.JOB_FAILED
    assert result.err.splitlines()[-1] == (
        "tflaunch: error: job mnist failed: Failed: PodFailurePolicy: exit 78; worker 1 exited "
        "78 (configuration error); not retried: a restart cannot fix it (earlier: preempted "
        "1x, resumed from the last checkpoint)"  # the pod replaced after exit 79 is no restart
    )


def test_the_timeout_takes_kubectls_duration_spelling(
    tflaunch: Tflaunch, running: dict[str, Any]
) -> None:
    # `kubectl wait --timeout=500ms` spelling; a bare number stays seconds (above).
    result = tflaunch("wait", "mnist", "--timeout=500ms", "--pending-warning", "2m")

    assert result.code == ExitStatus.TIMEOUT, result.err
    assert result.err.splitlines()[-1].startswith("tflaunch: error: job mnist did not finish")


def test_a_timeout_that_is_not_a_duration_is_one_line_naming_the_flag(
    tflaunch: Tflaunch, running: dict[str, Any]
) -> None:
    result = tflaunch("wait", "mnist", "--timeout", "5 minutes")

    assert result.code == ExitStatus.BAD_INPUT
    (line,) = result.err.strip().splitlines()
    assert "'--timeout'" in line and "e.g. 90s, 5m or 1h30m" in line, line


def test_a_restart_in_place_since_the_last_read_is_said_when_the_job_ends(
    tflaunch: Tflaunch, fake: FakeKubernetes, running: dict[str, Any], later: Later
) -> None:
    """wait reads the chief's log every 15 s: the end's read says what came after the last."""
    from launcher.core import contract

    def restart_then_complete() -> None:
        killed = "Epoch 2/5 (the program was killed by SIGKILL)"
        fake.log("mnist-worker-0-a0", contract.restart_line(1, [(1, killed)]))
        fake.put(pod_for(running, 0, phase="Succeeded", exit_code=0))
        fake.put(pod_for(running, 1, phase="Succeeded", exit_code=0))
        fake.put(with_condition(running, "Complete"))

    later(0.3, restart_then_complete)

    result = tflaunch("wait", "mnist", "--timeout", "10")

    assert result.code == ExitStatus.SUCCESS
    said = [line for line in result.err.splitlines() if "restart in place" in line]
    assert said == [
        "mnist: restart in place 1: worker 1 was killed by SIGKILL: Epoch 2/5; every worker "
        "restarts its program in its pod, resuming from the last checkpoint"
    ]
