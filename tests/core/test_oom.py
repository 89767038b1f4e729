"""The same worker OOM-killed again at about the same point is not restarted (issue 40): one
rule (`launcher.core.oom`) for the operator and `tflaunch wait` on a plain Job."""

from __future__ import annotations

import datetime

from launcher.core import oom
from launcher.core.worker_end import WorkerEnd

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def killed(index: int, *, started: float = 0, finished: float = 10) -> WorkerEnd:
    return WorkerEnd(index, 137, signal="SIGKILL", reason="OOMKilled", memory_limit="200Mi",
                     started_at=at(started), finished_at=at(finished))  # fmt: skip


def exited(index: int, code: int = 1, *, started: float = 0, finished: float = 11) -> WorkerEnd:
    return WorkerEnd(index, code, started_at=at(started), finished_at=at(finished))


def test_the_same_worker_killed_at_the_same_step_twice_is_not_retried() -> None:
    again = oom.killed_again([oom.Failure(killed(1), 40), oom.Failure(killed(1), 45)], 100)
    assert again is not None and again.why == (
        "OOM-killed again at step 45, as before at step 40: not retried, it would be killed at "
        "the same point again"
    )


def test_a_kill_well_past_the_first_one_is_restarted() -> None:
    assert oom.killed_again([oom.Failure(killed(1), 40), oom.Failure(killed(1), 141)], 100) is None


def test_another_worker_or_another_end_in_between_is_restarted() -> None:
    assert oom.killed_again([oom.Failure(killed(0), 40), oom.Failure(killed(1), 40)], 100) is None
    assert oom.killed_again([oom.Failure(exited(1), 40), oom.Failure(killed(1), 40)], 100) is None
    assert oom.killed_again([oom.Failure(killed(1), 40)], 100) is None


def test_a_peer_alone_between_two_kills_at_the_same_point_does_not_hide_them() -> None:
    """Worker 1's pod comes back after the Job controller's back-off, worker 0's earlier: its
    rendezvous times out alone (exit 1) at the same step, after worker 1's second kill."""
    failures = [oom.Failure(killed(1), 5), oom.Failure(killed(1), 5), oom.Failure(exited(0), 5)]
    again = oom.killed_again(failures, 100)
    assert again is not None and again.kill is failures[1]
    assert again.why.startswith("OOM-killed again at step 5, as before at step 5")
    between = [oom.Failure(killed(1), 40), oom.Failure(exited(0), 41), oom.Failure(killed(1), 42)]
    assert oom.killed_again(between, 100) is not None


def test_a_failure_well_past_the_first_kill_in_between_restarts_the_second() -> None:
    """The group got past the point of the first kill (then resumed from an older
    checkpoint): the second is not the same kill."""
    failures = [oom.Failure(killed(1), 40), oom.Failure(exited(0), 400), oom.Failure(killed(1), 45)]
    assert oom.killed_again(failures, 100) is None


def test_steps_not_known_count_as_the_same_point() -> None:
    again = oom.killed_again([oom.Failure(killed(1)), oom.Failure(killed(1), 45)], 100)
    assert again is not None and again.why.startswith("OOM-killed again at step 45, as before:")


def test_attempts_group_the_pods_of_one_group_failure_and_blame_the_oom_kill() -> None:
    """Worker 0 dies of the lost collective a moment after worker 1's OOM kill: one attempt,
    worker 1 its culprit; the pods started after it are the next attempt."""
    ends = [
        (exited(0, finished=12), None),
        (killed(1, finished=10), 40),
        (killed(1, started=20, finished=30), 42),
        (exited(0, started=20, finished=31), 42),
    ]
    failures = oom.attempts(ends)
    assert [(f.culprit.index, f.culprit.reason, f.step) for f in failures] == [
        (1, "OOMKilled", 40),
        (1, "OOMKilled", 42),
    ]
    assert oom.killed_again(failures, 100) is not None


def test_a_failure_says_oomkilled_with_the_limit_the_step_and_the_advice() -> None:
    assert oom.Failure(killed(1), 40).describe() == (
        "worker 1 was OOMKilled (exit 137) at its memory limit 200Mi, at step 40: raise "
        "spec.resources.limits.memory or lower spec.trainer.globalBatchSize"
    )
