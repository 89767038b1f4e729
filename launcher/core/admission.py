"""Where Kueue's admission of a job stands, read from its Workloads given as plain dicts.

Under `spec.gang: kueue` the job's one Job is created suspended with the queue label; Kueue
makes a Workload for it (labelled with the Job's uid) and resumes the Job once the Workload
is admitted, that is once the queue's quota holds all its pods at once. Until then no pod
exists, so nothing about pods says why the job waits: the Workload's conditions do, in
Kueue's own words (`QuotaReserved` False, e.g. `couldn't assign flavors to pod set main:
insufficient quota for nvidia.com/gpu ...`). Pure: no cluster access.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from launcher.core import reading
from launcher.core.gang import KUEUE_QUEUE_LABEL

Obj = Mapping[str, Any]

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""The label Kueue puts on a Job's Workload: the Job's uid."""

MESSAGE_LIMIT = 400


def queue_of(job: Obj) -> str | None:
    """The LocalQueue a Job is queued in (its Kueue label), or None."""
    queue = reading.labels_of(job).get(KUEUE_QUEUE_LABEL)
    return str(queue) if queue else None


def queued(jobs: Sequence[Obj]) -> list[Obj]:
    """The Jobs queued in Kueue (its queue label), admitted or not."""
    return [j for j in jobs if queue_of(j)]


def held(jobs: Sequence[Obj]) -> list[Obj]:
    """The Jobs Kueue holds back: queued (the label) and suspended."""
    return [j for j in jobs if queue_of(j) and reading.spec(j).get("suspend") is True]


def waiting(jobs: Sequence[Obj], workloads: Sequence[Obj] | None) -> str | None:
    """Why Kueue has not admitted the job yet, `waiting for Kueue admission in queue Q:
    <Kueue's message>`, while one of its queued Jobs is suspended and not admitted; None
    otherwise, and when the Workloads could not be read (`workloads` None)."""
    if workloads is None:
        return None
    for job in held(jobs):
        uid = reading.meta(job).get("uid")
        mine = [w for w in workloads if reading.labels_of(w).get(JOB_UID_LABEL) == uid]
        if any(_true(w, "Admitted") and not _true(w, "Evicted") for w in mine):
            continue  # admitted: Kueue resumes the Job next
        queue = queue_of(job)
        return f"waiting for Kueue admission in queue {queue}: {_why(mine)}"
    return None


def _why(workloads: Sequence[Obj]) -> str:
    if not workloads:
        return (
            "Kueue has made no Workload for the Job yet (is Kueue running, with batch/job "
            "among its integrations?)"
        )
    workload = max(workloads, key=lambda w: str(reading.meta(w).get("creationTimestamp") or ""))
    if reading.spec(workload).get("active") is False:
        return f"Workload {reading.name(workload)} is deactivated (spec.active: false)"
    conditions = _conditions(workload)
    reserved = conditions.get("QuotaReserved")
    why = _message(reserved) if reserved and reserved.get("status") == "False" else None
    evicted = conditions.get("Evicted")
    if not evicted or evicted.get("status") != "True":
        return why or "Kueue has not considered its Workload yet"
    eviction = f"{evicted.get('reason') or 'Evicted'}: {_message(evicted) or 'no message'}"
    if why is None:  # its quota is released once the pods are gone
        return f"evicted ({eviction}); Kueue requeues it once its pods are gone"
    return f"{why} (evicted earlier: {eviction})"


def evictions(workloads: Sequence[Obj]) -> dict[str, int]:
    """How many times Kueue evicted the job's Workloads, per reason (`Preempted`,
    `PodsReadyTimeout`, ...), from their `status.schedulingStats.evictions`. An eviction
    removes the pods and queues the job again: not a failure, no retry used."""
    counts: dict[str, int] = {}
    for workload in workloads:
        stats = reading.status(workload).get("schedulingStats") or {}
        for eviction in stats.get("evictions") or []:
            if isinstance(eviction, Mapping):
                reason = str(eviction.get("reason") or "Evicted")
                counts[reason] = counts.get(reason, 0) + int(eviction.get("count") or 0)
    return {reason: count for reason, count in sorted(counts.items()) if count > 0}


def describe_evictions(counts: Mapping[str, int]) -> str:
    """`evicted by Kueue 2 times (Preempted 1, PodsReadyTimeout 1): ...` ("" when never)."""
    total = sum(counts.values())
    if not total:
        return ""
    times = "once" if total == 1 else f"{total} times"
    reasons = ", ".join(r if total == 1 else f"{r} {n}" for r, n in counts.items())
    return (
        f"evicted by Kueue {times} ({reasons}): its pods were removed and it queued again, "
        "resuming from its last save (not a restart)"
    )


def _conditions(workload: Obj) -> dict[str, Obj]:
    found = reading.status(workload).get("conditions") or []
    return {str(c.get("type")): c for c in found if isinstance(c, Mapping)}


def _true(workload: Obj, kind: str) -> bool:
    return (_conditions(workload).get(kind) or {}).get("status") == "True"


def _message(condition: Obj) -> str | None:
    """A condition's message on one line, at most `MESSAGE_LIMIT` characters."""
    text = " ".join(str(condition.get("message") or "").split())
    if not text:
        return None
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"
