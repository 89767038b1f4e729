"""Restarts in place read from the wrappers' TFLAUNCH_RESTART lines (`launcher.core.in_place`):
the one reading `tflaunch status`, `wait` and the operator count and name them with."""

from __future__ import annotations

from launcher.core import contract, exit_policy, in_place, worker_end

KILLED = "step 40/100 (the program was killed by SIGKILL)"
NAME_ERROR = "NameError: name 'modle' is not defined (the program exited 1)"
PEER_LOST = "UnavailableError: Collective ops is aborted by: worker 1 died (the program exited 1)"


def test_the_wrappers_line_reads_back_as_the_restart_it_names() -> None:
    line = contract.restart_line(1, [(1, KILLED)])
    (found,) = in_place.restarts(["12:00:01 [worker 0/2] INFO starting", line])
    assert found.generation == 1
    assert found.describe() == "worker 1 was killed by SIGKILL: step 40/100"


def test_the_culprit_is_named_first_and_a_survivors_peer_error_after_it() -> None:
    line = contract.restart_line(2, [(0, PEER_LOST), (1, KILLED)])
    (found,) = in_place.restarts([line])
    assert found.describe() == "worker 1 was killed by SIGKILL: step 40/100 (worker 0 exited 1 too)"
    assert found.culprit is not None and found.culprit.index == 1


def test_an_exit_code_is_said_with_the_programs_error_line() -> None:
    (found,) = in_place.restarts([contract.restart_line(1, [(1, NAME_ERROR)])])
    assert found.describe() == "worker 1 exited 1: NameError: name 'modle' is not defined"


def test_a_line_glued_after_other_output_counts_and_each_generation_counts_once() -> None:
    line = contract.restart_line(1, [(1, KILLED)])
    lines = [f"some output{line}", line, contract.restart_line(2, [(0, NAME_ERROR)])]
    assert [r.generation for r in in_place.restarts(lines)] == [1, 2]


def test_broken_or_foreign_lines_are_not_restarts() -> None:
    lines = [
        "TFLAUNCH_RESTART {not json",
        'TFLAUNCH_RESTART {"generation": 0, "failed": []}',
        'TFLAUNCH_RESTART {"generation": true}',
        'TFLAUNCH_RESTART ["generation", 1]',
        "restarting in place at generation 1",
    ]
    assert in_place.restarts(lines) == []


def test_the_count_is_the_newest_generation_a_restart_or_progress_line_gave() -> None:
    found = in_place.restarts([contract.restart_line(3, [(1, KILLED)])])
    assert in_place.count(found) == 3
    assert in_place.count(found, generation=4) == 4  # the restart line left the log tail
    assert in_place.count([], None) == 0


def test_an_error_line_from_a_program_is_cut_to_its_last_line() -> None:
    (found,) = in_place.restarts(
        [contract.restart_line(1, [(1, "first\nsecond (the program exited 2)")])]
    )
    assert found.failed == ((1, "second (the program exited 2)"),)
    assert found.describe() == "worker 1 exited 2: second"


def test_a_worker_that_spent_the_budget_in_place_is_the_cause_said_with_its_error() -> None:
    """The wrapper past spec.backoffLimit restarts in place: exit 76 (FailJob) for the worker
    whose program failed, 1 for one stopped with the group."""
    spent = f"{KILLED}; the group restarted 2 times (spec.backoffLimit)"
    ends = [
        worker_end.WorkerEnd(0, 1, last_error="stopped: the group restarted 2 times"),
        worker_end.WorkerEnd(1, contract.EXIT_RESTARTS_SPENT, last_error=spent),
    ]
    assert worker_end.account(ends) == (
        "worker 1 exited 76 (restart budget spent): step 40/100 (the program was killed by "
        "SIGKILL); the group restarted 2 times (spec.backoffLimit) (worker 0 exited 1 too)"
    )
    assert worker_end.not_retried(ends[1]) == (
        "not retried: the group restarted spec.backoffLimit times already"
    )
    assert exit_policy.job_action(contract.EXIT_RESTARTS_SPENT) == "FailJob"
