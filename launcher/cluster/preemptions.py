"""The preemptions a job rode out, read from its pods (pure: dicts in, a summary out).

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

from launcher.core import contract, reading
from launcher.core.timestamps import EPOCH, created_at

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
    grouped = reading.preemption_events(reading.preempted_exits(pods))
    if not grouped:
        return Preemptions()
    latest = grouped[-1]
    steps = [e.step for e in latest if e.step is not None]
    return Preemptions(
        count=len(grouped),
        resumed_at_step=steps[0] if steps else None,
        last=latest[0].finished,
    )


def replaced_by_index(pods: Iterable[Obj]) -> dict[int, int]:
    """Per worker index, its pods that exited 79 and have a newer pod: the replacements
    that were preemptions, not failures (what `wait` leaves out of "worker N restarted")."""

    by_index: dict[int, list[Obj]] = {}
    for pod in pods:
        index = reading.pod_index(pod)
        if index is not None:
            by_index.setdefault(index, []).append(pod)
    replaced: dict[int, int] = {}
    for index, group in by_index.items():
        ordered = sorted(group, key=lambda p: (created_at(p) or EPOCH, p["metadata"]["name"]))
        count = sum(
            (reading.terminated(p) or {}).get("exitCode") == contract.EXIT_PREEMPTED
            for p in ordered[:-1]
        )
        if count:
            replaced[index] = count
    return replaced
