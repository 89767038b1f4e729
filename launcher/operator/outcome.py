"""Step 2 of a decision, decide restart: the outcome of a running group.

The live Jobs and their pods say whether the group succeeded, failed for good (a
configuration error, programs that diverged, the deadline, the restart budget spent) or must
restart as a whole (MultiWorkerMirroredStrategy cannot continue with a missing peer).
Pure, like the rest of `launcher.operator.reconcile`, which calls `outcome()` and, when it
cannot create the workers in time, `fail()`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from launcher.core import contract, exit_policy, oom, worker_end
from launcher.core.reading import (
    WorkerExit,
    failed_workers,
    group_outcome,
    group_succeeded,
    job_complete,
    job_failed,
    pods_divergence,
    terminated,
)
from launcher.core.timestamps import format_time
from launcher.operator.conditions import with_phase, with_workers
from launcher.operator.objects import chief_pod, name_of, parse_result
from launcher.operator.observe import Group
from launcher.operator.plan import RESTART_POLL_SECONDS, Plan, transition_events


def outcome(g: Group) -> Plan | None:
    """Succeeded, Failed or Restarting, when the live Jobs say so: the exit-code table's
    decision (`reading.group_outcome`, local mode's too) from the failed workers' exits."""
    ours = [j for j in g.live if name_of(j) in g.job_names]
    if group_succeeded(ours, workers=g.workers):  # chief: whatever the others did after
        return _succeed(g)
    exits = failed_workers(g.pods)
    ends = worker_end.ends_of(g.pods)
    failures = [(j, c) for j in g.live if (c := job_failed(j)) is not None]
    why = worker_end.not_retried(worker_end.culprit(ends))
    if why or any(c.get("reason") == "PodFailurePolicy" for _, c in failures):
        what = worker_end.account(ends) if why else _job_message(failures)
        return fail(
            g, "ConfigError", f"{what}; {why or exit_policy.why(contract.EXIT_CONFIG_ERROR)}"
        )
    if any(c.get("reason") == "DeadlineExceeded" for _, c in failures):
        return fail(
            g,
            "DeadlineExceeded",
            "the job ran longer than spec.activeDeadlineSeconds "
            f"({g.job.spec.active_deadline_seconds}s)",
        )
    if failures and (diverged := pods_divergence(g.pods)):
        return fail(
            g, "ProgramsDiverged", f"{diverged.describe()}; not retried: a restart would repeat it"
        )
    if failures and (again := _killed_for_memory_again(g, ends)):
        return fail(g, "OOMKilledAgain", again)
    if failures:
        what = _what_failed(ends, exits, failures)
        # A failed Job is never "done": an exit 0 of a failed pod counts as a stop.
        decision = group_outcome(
            [e.exit_code or None for e in exits],
            restarts=g.status.restarts,
            backoff_limit=g.job.spec.backoff_limit,
        )
        return _spent(g, what) if decision == "fail" else _restart(g, what)
    return None


def _succeed(g: Group) -> Plan:
    chief = chief_pod(g.pods)
    result = parse_result((terminated(chief) or {}).get("message")) if chief else None
    result = result or parse_result(g.observed.chief_log)
    message = (
        "the chief (worker 0) completed"
        if g.job.spec.success_policy == "chief"
        else f"all {g.workers} workers completed"
    )
    if result is None:
        message += f"; no {contract.RESULT_LINE_PREFIX.strip()} line in the chief's log"
    elif isinstance(result.get("test_accuracy"), int | float):
        message += f"; test accuracy {result['test_accuracy']:.4f}"
    status = with_phase(g.status, "Succeeded", "Completed", message, g.now)
    status = dataclasses.replace(
        with_workers(status, 0, g.workers),
        result=result or {},
        completion_time=format_time(g.now),
        start_time=g.status.start_time or format_time(g.now),
    )
    # successPolicy chief: the workers still running are stopped (the indexed Job's own
    # successPolicy stops its pods itself).
    running = tuple(name_of(j) for j in g.live if job_failed(j) is None and not job_complete(j))
    return Plan(status=status, delete_jobs=running, events=transition_events(g.old, status))


def fail(g: Group, reason: str, message: str) -> Plan:
    """Failed for good: stop what still runs (keep the failed Jobs for their logs)."""
    status = with_phase(g.status, "Failed", reason, message, g.now)
    status = dataclasses.replace(
        with_workers(status, 0, g.workers), completion_time=format_time(g.now)
    )
    running = tuple(name_of(j) for j in g.live if job_failed(j) is None and not job_complete(j))
    return Plan(status=status, delete_jobs=running, events=transition_events(g.old, status))


def _spent(g: Group, what: str) -> Plan:
    return fail(
        g,
        "BackoffLimitExceeded",
        f"{what}; the group was restarted {g.status.restarts} times already "
        f"(spec.backoffLimit: {g.job.spec.backoff_limit})",
    )


def _restart(g: Group, what: str) -> Plan:
    limit = g.job.spec.backoff_limit
    restarts = g.status.restarts + 1
    message = (
        f"{what}; restarting all {g.workers} workers from the last checkpoint "
        f"(restart {restarts} of {limit})"
    )
    status = with_phase(g.status, "Restarting", "WorkerFailed", message, g.now)
    culprit = worker_end.culprit(worker_end.ends_of(g.pods))
    last = f"{culprit.index} {culprit.reason}" if culprit and culprit.reason else ""
    if last and (step := _global_step(g)) is not None:
        last += f" at step {step}"
    status = dataclasses.replace(
        with_workers(status, 0, g.workers), restarts=restarts, last_failure=last
    )
    return Plan(
        status=status,
        delete_jobs=tuple(name_of(j) for j in g.live),
        events=transition_events(g.old, status),
        requeue_after=RESTART_POLL_SECONDS,
    )


def _what_failed(
    ends: Sequence[worker_end.WorkerEnd],
    exits: Sequence[WorkerExit],
    failures: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
) -> str:
    """The failure in the words every reader uses (`worker_end.account`); a pod that failed
    without its trainer ending (evicted before it started) by its pod's reason."""
    if any(end.failed for end in ends):
        return worker_end.account(ends)
    return exits[0].describe() if exits else _job_message(failures)


def _killed_for_memory_again(g: Group, ends: Sequence[worker_end.WorkerEnd]) -> str | None:
    """Why not to restart (`oom.killed_again`): the culprit is the worker OOM-killed at the
    last restart (`Status.last_failure`), again within an epoch of the step it reached."""
    culprit = worker_end.culprit(ends)
    last = LAST_FAILURE.fullmatch(g.status.last_failure)
    if culprit is None or last is None:
        return None
    before = worker_end.WorkerEnd(int(last.group("worker")), None, reason=last.group("reason"))
    step = last.group("step")
    failures = (
        oom.Failure(before, None if step is None else int(step)),
        oom.Failure(culprit, _global_step(g)),
    )
    progress = g.status.progress
    again = oom.killed_again(failures, progress.steps if progress else 0)
    return f"{worker_end.account(ends)}; {again.why}" if again else None


LAST_FAILURE = re.compile(r"(?P<worker>\d+) (?P<reason>\w+)(?: at step (?P<step>\d+))?")
"""`Status.last_failure`, as `_restart` writes it."""


def _global_step(g: Group) -> int | None:
    """The chief's last reported step, counted over all epochs."""
    progress = g.status.progress
    if progress is None:
        return None
    return oom.global_step(progress.epoch, progress.steps, progress.step)


def _job_message(failures: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> str:
    job, condition = failures[0]
    detail = condition.get("message") or condition.get("reason") or "failed"
    return f"Job {name_of(job)} failed: {detail}"
