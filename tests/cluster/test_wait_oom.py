"""`tflaunch wait` on a plain Job whose worker is OOM-killed (issue 40): each kill is named
with the container's memory limit and the step it reached; the same worker killed again at
about the same point stops the group (its Jobs' backoffLimit set to 0, why in an annotation)
and the wait ends with exit 3 in those words instead of looping until the budget is spent."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from launcher.core import labels, progress
from launcher.core.errors import ExitStatus
from launcher.core.progress import Progress
from tests.cluster.conftest import Result
from tests.cluster.fakeapi import FakeKubernetes
from tests.cluster.objects import pod_for, with_condition

Tflaunch = Callable[..., Result]
ADVICE = "raise spec.resources.limits.memory or lower spec.trainer.globalBatchSize"


def oom_attempt(fake: FakeKubernetes, job: dict[str, Any], attempt: int, step: int) -> None:
    """Attempt `attempt` of both workers ends: worker 1 OOM-killed at `step` (the chief's log
    says so), worker 0 failing after it on the lost collective; the next attempt starts."""
    chief = f"mnist-worker-0-a{attempt}"
    fake.log(chief, progress.format_line(Progress(1, 3, step, 469)))
    age = 100 - 40 * attempt  # started; failed 30 s later, so the next attempt starts after
    fake.put(pod_for(job, 1, attempt=attempt, phase="Failed", exit_code=137,
                     reason="OOMKilled", age=age))  # fmt: skip
    fake.put(pod_for(job, 0, attempt=attempt, phase="Failed", exit_code=1, age=age))
    fake.put(pod_for(job, 0, attempt=attempt + 1, age=age - 40))
    fake.put(pod_for(job, 1, attempt=attempt + 1, age=age - 40))


@pytest.fixture
def job_controller(fake: FakeKubernetes, job: dict[str, Any]) -> Iterator[None]:
    """Fails the Job as the Job controller does once its backoffLimit is below its failed
    pods (here: set to 0 by a patch)."""
    done = threading.Event()

    def run() -> None:
        # Like the controller, it reconciles until the condition holds: a put racing wait's
        # own patch of the Job can be overwritten by it.
        while not done.wait(0.05):
            stored = fake.get("Job", "mnist-worker")
            if stored and stored["spec"].get("backoffLimit") == 0:
                conditions = stored.get("status", {}).get("conditions", [])
                if not any(c["type"] == "Failed" for c in conditions):
                    message = "Job has reached the specified backoff limit"
                    fake.put(with_condition(stored, "Failed", "BackoffLimitExceeded", message))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    done.set()
    thread.join()


def when(condition: Callable[[], bool], deadline: float = 60) -> None:
    end = time.monotonic() + deadline
    while not condition() and time.monotonic() < end:
        time.sleep(0.01)


def two_kills(fake: FakeKubernetes, job: dict[str, Any], steps: tuple[int, int]) -> None:
    """Two OOM attempts, each once `wait` has seen what came before (a kill is named with
    the chief's step when wait sees it; timed sleeps raced a loaded machine)."""
    after_the_first_read(fake)
    oom_attempt(fake, job, 0, steps[0])
    after_the_next_read(fake)
    oom_attempt(fake, job, 1, steps[1])


def _log_reads(fake: FakeKubernetes) -> int:
    with fake.lock:
        return sum(r.path.endswith("/log") for r in fake.requests)


def after_the_first_read(fake: FakeKubernetes) -> None:
    """Returns once wait has read the chief's log the first time (its first round)."""
    when(lambda: _log_reads(fake) > 0)


def after_the_next_read(fake: FakeKubernetes) -> None:
    """Returns once wait has read the chief's log again: on seeing a failed pod it reads it at
    once, and otherwise only every job_progress.REFRESH_SECONDS (15 s)."""
    reads = _log_reads(fake)
    when(lambda: _log_reads(fake) > reads)


def steps_of_the_chief(fake: FakeKubernetes, job: dict[str, Any]) -> None:
    fake.put(pod_for(job, 0, attempt=0, age=100))
    fake.put(pod_for(job, 1, attempt=0, age=100))
    fake.log("mnist-worker-0-a0", progress.format_line(Progress(1, 3, 40, 469)))


def test_a_worker_oom_killed_twice_at_the_same_point_ends_the_wait_with_exit_3(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any], job_controller: None
) -> None:
    steps_of_the_chief(fake, job)

    thread = threading.Thread(target=two_kills, args=(fake, job, (40, 42)), daemon=True)
    thread.start()
    result = tflaunch("wait", "mnist", "--timeout", "20")
    thread.join()

    assert result.code == ExitStatus.JOB_FAILED == 3, result.err
    assert (
        "mnist: worker 1 restarted (1 so far): it was OOMKilled (exit 137) at its memory limit "
        f"4Gi, at step 40: {ADVICE}; the whole group restarts" in result.err
    ), result.err
    error = result.err.splitlines()[-1]
    assert error == (
        "tflaunch: error: job mnist failed: Failed: OOMKilledAgain: worker 1 was OOMKilled "
        f"(exit 137) at its memory limit 4Gi, at step 42: {ADVICE}; OOM-killed again at step "
        "42, as before at step 40: not retried, it would be killed at the same point again; "
        "after 2 group restarts"
    ), error
    stored = fake.get("Job", "mnist-worker")
    assert stored is not None and stored["spec"]["backoffLimit"] == 0
    assert stored["metadata"]["annotations"][labels.STOPPED].startswith("OOMKilledAgain: ")


def test_a_second_kill_seen_after_its_peers_lone_retry_still_stops_the_group(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any], job_controller: None
) -> None:
    """The Job controller replaces each worker's pod after its own back-off: worker 0's third
    pod times out alone waiting for worker 1, and worker 1's second OOM kill reaches the
    wait only after that (its node's kubelet late under load). Seen in CI on kind."""
    steps_of_the_chief(fake, job)

    def kill_retry_alone_then_report_the_kill() -> None:
        after_the_first_read(fake)
        oom_attempt(fake, job, 0, 40)
        after_the_next_read(fake)
        fake.log("mnist-worker-0-a1", progress.format_line(Progress(1, 3, 42, 469)))
        fake.put(pod_for(job, 0, attempt=1, phase="Failed", exit_code=1, age=60))
        fake.put(pod_for(job, 0, attempt=2, phase="Failed", exit_code=1, age=20))
        fake.log("mnist-worker-0-a2", progress.format_line(Progress(1, 3, 42, 469)))
        after_the_next_read(fake)
        fake.put(pod_for(job, 1, attempt=1, phase="Failed", exit_code=137, reason="OOMKilled",
                         age=60))  # fmt: skip

    thread = threading.Thread(target=kill_retry_alone_then_report_the_kill, daemon=True)
    thread.start()
    result = tflaunch("wait", "mnist", "--timeout", "20")
    thread.join()

    assert result.code == ExitStatus.JOB_FAILED == 3, result.err
    error = result.err.splitlines()[-1]
    assert "Failed: OOMKilledAgain: worker 1 was OOMKilled (exit 137)" in error, result.err
    assert "OOM-killed again at step 42, as before at step 40" in error, result.err


def test_status_of_the_stopped_job_says_why(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    """The Job as wait's stop leaves it once the Job controller has failed it (built here,
    not raced for: wait's patch itself is checked in the test above and on the real node)."""
    steps_of_the_chief(fake, job)
    oom_attempt(fake, job, 0, 40)
    oom_attempt(fake, job, 1, 42)
    stopped = fake.get("Job", "mnist-worker") or job
    stopped = {**stopped, "spec": {**stopped["spec"], "backoffLimit": 0}}
    why = "OOMKilledAgain: worker 1 was OOMKilled (exit 137) at its memory limit 4Gi"
    stopped["metadata"] = {
        **stopped["metadata"],
        "annotations": {**stopped["metadata"].get("annotations", {}), labels.STOPPED: why},
    }
    message = "Job has reached the specified backoff limit"
    fake.put(with_condition(stopped, "Failed", "BackoffLimitExceeded", message))

    result = tflaunch("status", "mnist")
    assert "OOMKilledAgain: worker 1 was OOMKilled (exit 137)" in result.out, result.out
    assert "BackoffLimitExceeded" not in result.out, result.out


def test_one_oom_kill_is_named_and_the_group_restarts(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    steps_of_the_chief(fake, job)

    def kill_then_finish() -> None:
        after_the_first_read(fake)
        oom_attempt(fake, job, 0, 40)
        after_the_next_read(fake)
        fake.put(with_condition(fake.get("Job", "mnist-worker") or job, "Complete"))

    threading.Thread(target=kill_then_finish, daemon=True).start()
    result = tflaunch("wait", "mnist", "--timeout", "20")

    assert result.code == 0, result.err
    assert f"it was OOMKilled (exit 137) at its memory limit 4Gi, at step 40: {ADVICE}" in (
        result.err
    )
    stored = fake.get("Job", "mnist-worker")
    assert stored is not None and labels.STOPPED not in stored["metadata"].get("annotations", {})
