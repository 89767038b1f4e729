"""Preemptions the workers saved before: counted in status, never against backoffLimit.

A worker that exits `contract.EXIT_PREEMPTED` (79) saved at the same step as every other
worker. The Job's podFailurePolicy ignores that exit: the Job controller replaces the pod
without moving toward its backoffLimit, and the replaced group resumes at the saved step.
The operator therefore restarts nothing; it only records the preemption
(status.preemptions, status.lastPreemptionTime, status.resumedAtStep) and says so.

One preemption ends every worker's pod within the grace period, so exits 79 that finish
within spec.terminationGracePeriodSeconds of the first one count once. Counting is
idempotent: exits at or before status.lastPreemptionTime (+ the grace period) were counted.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from launcher.core import contract
from launcher.core.timestamps import format_time, parse_time
from launcher.operator.crd import Status
from launcher.operator.objects import terminated_state


@dataclasses.dataclass(frozen=True)
class PreemptedExit:
    finished: datetime.datetime
    step: int | None
    """The step the trainer said it saved at (its termination message), if it said."""


def preempted_exits(pods: Iterable[Mapping[str, Any]]) -> list[PreemptedExit]:
    """The trainer containers that exited 79, oldest first."""
    exits = []
    for pod in pods:
        terminated = terminated_state(pod)
        if not terminated or terminated.get("exitCode") != contract.EXIT_PREEMPTED:
            continue
        finished = parse_time(terminated.get("finishedAt"))
        if finished is None:
            continue
        exits.append(PreemptedExit(finished, contract.saved_step(terminated.get("message"))))
    return sorted(exits, key=lambda e: e.finished)


def record(status: Status, pods: Iterable[Mapping[str, Any]], grace_seconds: int) -> Status:
    """`status` with the preemptions not counted yet added."""
    grace = datetime.timedelta(seconds=grace_seconds)
    anchor = parse_time(status.last_preemption_time)
    count, step = status.preemptions, status.resumed_at_step
    for preempted in preempted_exits(pods):
        if anchor is not None and preempted.finished <= anchor + grace:
            step = preempted.step if preempted.step is not None else step
            continue  # counted already, or another worker of the same preemption
        count, anchor = count + 1, preempted.finished
        step = preempted.step
    if count == status.preemptions and step == status.resumed_at_step:
        return status
    return dataclasses.replace(
        status,
        preemptions=count,
        last_preemption_time=format_time(anchor) if anchor else None,
        resumed_at_step=step,
    )


def said(new: Status | None, old: Status) -> Status | None:
    """`new` whose message (while the group runs) ends with the preemptions; None: as `old`."""
    if new is None or not new.preemptions or new.phase not in ("Created", "Running"):
        return new
    text = describe(new)
    if text not in new.message:
        new = dataclasses.replace(new, message=f"{new.message}; {text}")
    return None if new == old else new


def describe(status: Status) -> str:
    """ "preempted 2 times, resumed at step 70" ("" when never preempted)."""
    if not status.preemptions:
        return ""
    times = "once" if status.preemptions == 1 else f"{status.preemptions} times"
    where = (
        f"resumed at step {status.resumed_at_step}"
        if status.resumed_at_step is not None
        else "resumed from the last checkpoint"
    )
    return f"preempted {times} (every worker saved first; not a restart), {where}"
