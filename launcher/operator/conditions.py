"""Status bookkeeping: the phase, its conditions and the worker counts, kept consistent.

Kubernetes-style conditions (one per phase, plus Created) change their lastTransitionTime
only when their status changes; Failed for a reason in `RETRYABLE_FAILURES` is not final.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Literal

from launcher.api.status import FINISHED_PHASES as FINISHED_PHASES
from launcher.api.status import INVALID_SPEC as INVALID_SPEC
from launcher.api.status import NAME_CONFLICT as NAME_CONFLICT
from launcher.api.status import ORPHANED_PODS as ORPHANED_PODS
from launcher.api.status import PODS_NOT_CREATED as PODS_NOT_CREATED
from launcher.api.status import REJECTED as REJECTED
from launcher.api.status import RETRYABLE_FAILURES as RETRYABLE_FAILURES
from launcher.api.status import WORKERS_CANNOT_START as WORKERS_CANNOT_START
from launcher.api.status import Condition, Phase, Status
from launcher.core.group_status import with_workers as with_workers
from launcher.core.timestamps import format_time
from launcher.operator import crd

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


def finished(status: Status) -> bool:
    return status.phase in FINISHED_PHASES and not (
        status.phase == "Failed" and status.reason in RETRYABLE_FAILURES
    )
