"""Preemptions the workers saved before: counted in status, never against backoffLimit.

A worker that exits `contract.EXIT_PREEMPTED` (79) saved at the same step as every other
worker. The Job's podFailurePolicy ignores that exit: the Job controller replaces the pod
without moving toward its backoffLimit, and the replaced group resumes at the saved step.
The operator therefore restarts nothing; it only records the preemption
(status.preemptions, status.lastPreemptionTime, status.resumedAtStep) and says so.

One preemption ends every worker's pod within the grace period at one saved step: the exits
are grouped as `launcher.core.reading` groups them for `tflaunch status`. Counting is
idempotent: the preemption that began at status.lastPreemptionTime was counted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from launcher.api.status import describe_preemptions as describe
from launcher.core import reading
from launcher.core.timestamps import format_time, parse_time
from launcher.operator.crd import Status


def record(status: Status, pods: Iterable[Mapping[str, Any]], grace_seconds: int) -> Status:
    """`status` with the preemptions not counted yet added: the pods' exits 79 grouped into
    preemptions as `tflaunch status` groups them (`reading.preemption_events`), the one
    counted last (status.lastPreemptionTime, .resumedAtStep) standing in for its exits."""
    anchor = parse_time(status.last_preemption_time)
    exits = reading.preempted_exits(pods)
    counted: list[reading.PreemptedExit] = []
    if anchor is not None:
        counted = [reading.PreemptedExit("", None, anchor, status.resumed_at_step, grace_seconds)]
        exits = [e for e in exits if e.finished >= anchor]
    events = reading.preemption_events([*counted, *exits])
    new = events[1:] if counted else events
    latest = events[-1] if events else []
    steps = [e.step for e in latest if e.step is not None]
    count = status.preemptions + len(new)
    step = steps[0] if steps else (None if new else status.resumed_at_step)
    if count == status.preemptions and step == status.resumed_at_step:
        return status
    return dataclasses.replace(
        status,
        preemptions=count,
        last_preemption_time=format_time(latest[0].finished) if latest else None,
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
