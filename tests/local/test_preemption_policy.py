"""`tflaunch local`'s decisions after a preemption (pure: no processes)."""

from __future__ import annotations

import pytest

from launcher.core import contract
from launcher.core.errors import SpecError
from launcher.core.load import load_job
from launcher.core.worker_end import GroupEnd
from launcher.local.runner import describe_preemption

P = contract.EXIT_PREEMPTED


@pytest.mark.parametrize(
    "codes, restarts, expected",
    [
        ((P, P), 0, "resume"),
        ((P, P), 3, "resume"),  # a preemption uses no retry, even with none left
        ((P, None), 3, "resume"),  # the other was stopped after the grace period
        ((0, P), 0, "resume"),
        ((P, 1), 0, "restart"),  # a worker failed: that is a failure, whoever saved
        ((P, 1), 3, "fail"),
        ((P, contract.EXIT_CONFIG_ERROR), 0, "fail"),
        ((P, -9), 0, "restart"),
    ],
)
def test_a_preemption_resumes_without_using_a_retry(codes, restarts, expected):
    assert GroupEnd.of(codes).next_step(restarts, backoff_limit=3) == expected


def test_the_restart_says_where_the_group_resumes():
    attempt = GroupEnd.of((P, P), (None, None), (None, 70))
    assert describe_preemption(attempt) == (
        "preempted, every worker saved at step 70; resuming at step 70"
    )
    assert describe_preemption(GroupEnd.of((P, None))) == (
        "preempted, resuming from the last checkpoint"
    )
    assert GroupEnd.of((P, None)).ends[0].describe() == "worker 0 exited 79 (preempted, saved)"
    assert GroupEnd.of((P, None)).culprit is None  # a preemption is no failure


def test_the_trainers_line_is_what_the_launcher_parses():
    line = (
        "12:00:01 [worker 1/2] WARNING preempted: every worker saved at step 70 (epoch 2, "
        "step 30 of 40); exiting 79 so that the group restarts and resumes there"
    )
    match = contract.PREEMPTED_SAVED.search(line)
    assert match and match.group("step") == "70"


def test_a_grace_period_below_one_second_is_refused_naming_the_field():
    with pytest.raises(SpecError, match=r"spec\.terminationGracePeriodSeconds"):
        load_job(None, [("spec.terminationGracePeriodSeconds", 0)])


def test_tflaunch_status_says_a_worker_was_preempted_and_where_it_resumes():
    from launcher.core.worker_end import WorkerEnd

    saved = "preempted: every worker saved at step 70 (epoch 2, step 30 of 40); exiting 79 ..."
    end = WorkerEnd(0, P, last_error=saved)
    assert not end.failed  # a preemption is no failure
    assert end.describe() == f"worker 0 exited 79 (preempted, saved): {saved}"
