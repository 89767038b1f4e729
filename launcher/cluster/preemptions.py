"""The preemptions a job rode out, as `tflaunch status` and `wait` word them (pure).

The count, the step and the time are the group's Status (`launcher.core.group_status`,
which reads the pods; a MultiWorkerJob's Status has the same fields); `Preemptions` words it.

A worker told to stop (SIGTERM: eviction, drain, preemption) saves and exits
`contract.EXIT_PREEMPTED` (79), with the saved step in its termination message
(`contract.PREEMPTED_SAVED`). The Job's podFailurePolicy ignores that exit: the Job controller
replaces the pod without counting a failure, and the new group resumes at the saved step. The
per-worker table shows each index's newest pod, so without this count `status` and `wait`
would forget the preemption as soon as the replacement exists. (A job the operator runs has
the same count in its MultiWorkerJob's status.preemptions.)

Events, not pods: one preemption makes every worker save at the same step and exit 79 within
the pod's terminationGracePeriodSeconds; `launcher.core.reading.preemption_events` groups the
exits (the operator's count groups them the same way).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from launcher.api.status import Status
from launcher.core import group_status
from launcher.core.timestamps import parse_time

Obj = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Preemptions:
    """How often the group was preempted, and where it resumed."""

    count: int = 0
    """Preemption events (every worker saved at one step), not pods."""
    resumed_at_step: int | None = None
    """The step the latest preemption saved at (where the group resumed); None: not said."""
    last: datetime.datetime | None = None
    """When the latest preemption's first worker exited."""

    def words(self) -> str:
        """`preempted 2x, resumed at step 640 (not a failure: no retry used)`; "" if never."""
        if not self.count:
            return ""
        return f"{self.short()} (not a failure: no retry used)"

    def short(self) -> str:
        """`preempted 2x, resumed at step 640`, for `wait`'s one-line progress."""
        if not self.count:
            return ""
        where = (
            f"resumed at step {self.resumed_at_step}"
            if self.resumed_at_step is not None
            else "resumed from the last checkpoint"
        )
        return f"preempted {self.count}x, {where}"


def summarize(pods: Iterable[Obj]) -> Preemptions:
    """The job's preemptions from all of its pods (replaced ones included)."""
    return of(group_status.with_preemptions(Status(), pods))


def of(status: Status) -> Preemptions:
    """The preemptions a group's Status records (`launcher.core.group_status`)."""
    return Preemptions(
        count=status.preemptions,
        resumed_at_step=status.resumed_at_step,
        last=parse_time(status.last_preemption_time),
    )
