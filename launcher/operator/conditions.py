"""Status bookkeeping: the phase, its conditions and the worker counts, kept consistent.

Kubernetes-style conditions (one per phase, plus Created) change their lastTransitionTime
only when their status changes; Failed for a reason in `RETRYABLE_FAILURES` is not final.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Literal

from launcher.core.timestamps import format_time
from launcher.operator import crd
from launcher.operator.crd import Condition, Phase, Status

FINISHED_PHASES: frozenset[str] = frozenset({"Succeeded", "Failed"})
INVALID_SPEC = "InvalidSpec"
NAME_CONFLICT = "NameConflict"
REJECTED = "Rejected"
ORPHANED_PODS = "OrphanedPods"
"""Waiting: pods of an earlier group run without their Job (a new group would double them)."""
PODS_NOT_CREATED = "PodsNotCreated"
"""Waiting: the Job controller cannot create worker pods (a ResourceQuota, a webhook)."""
RETRYABLE_FAILURES: frozenset[str] = frozenset({INVALID_SPEC, NAME_CONFLICT, REJECTED})
"""Failed for these reasons is not final: nothing ran yet, and the operator tries again
when the spec is fixed (or the conflicting Job is gone)."""

_EXCLUSIVE = ("Running", "Restarting", "Suspended", "Succeeded", "Failed")


def with_phase(
    status: Status, phase: Phase, reason: str, message: str, now: datetime.datetime
) -> Status:
    """`status` in `phase`, with its conditions kept consistent.

    The condition named like the phase is True and carries the reason and message; the other
    phase conditions present become False. A lastTransitionTime changes only when its
    condition's status does. Created is a fact, not a phase: True from the first creation of
    the children on.
    """
    truth = {kind: kind == phase for kind in _EXCLUSIVE}
    truth["Created"] = _has_condition(status, "Created") or phase != "Failed"
    previous = {c.type: c for c in status.conditions}
    stamp = format_time(now)
    conditions = []
    for kind in crd.CONDITION_TYPES:
        value: Literal["True", "False"] = "True" if truth[kind] else "False"
        old = previous.get(kind)
        if old is None and value == "False":
            continue
        changed = old is None or old.status != value
        if kind == "Created":  # a fact, not a phase: set once, never updated
            why, what = (old.reason, old.message) if old else ("JobsCreated", "")
        elif kind == phase:
            why, what = reason, message
        elif old is not None and not changed:
            why, what = old.reason, old.message
        else:
            why, what = reason, f"now {phase}"
        since = stamp if changed or old is None else old.last_transition_time
        conditions.append(Condition(kind, value, why, what, since))
    return dataclasses.replace(
        status, phase=phase, reason=reason, message=message, conditions=tuple(conditions)
    )


def _has_condition(status: Status, kind: str) -> bool:
    return any(c.type == kind and c.status == "True" for c in status.conditions)


def with_workers(status: Status, ready: int, total: int) -> Status:
    return dataclasses.replace(
        status, workers=f"{ready}/{total}", workers_ready=ready, workers_total=total
    )


def finished(status: Status) -> bool:
    return status.phase in FINISHED_PHASES and not (
        status.phase == "Failed" and status.reason in RETRYABLE_FAILURES
    )
