"""A worker group's Status (`launcher.api.status.Status`) from its Jobs and Pods: the one
summary `tflaunch status/wait/list` show for a plain job and the operator stores for a
MultiWorkerJob (whose `.status` the CLI reads into the same type).

Pure: dicts in, a Status out, read through `launcher.core.reading`. What only the operator
knows (group restarts, the phase Restarting, conditions and their transition times) it adds
to this reading; what the objects say (the phase they imply, ready workers, preemptions,
start and completion) is read here once.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from launcher.api.status import Phase, Status
from launcher.core import reading
from launcher.core.timestamps import EPOCH, created_at, format_time

Obj = Mapping[str, Any]

ALL_READY = "AllWorkersReady"
WAITING = "WaitingForWorkers"


def group_status(jobs: Sequence[Obj], pods: Iterable[Obj], *, workers: int) -> Status:
    """The Status the Jobs and Pods of a group of `workers` workers say: phase, reason and
    message (from the Jobs), ready workers (as the Jobs count them), replacements that were
    not preemptions (`restarts`), preemptions, start and completion time."""
    pods = list(pods)
    phase, reason, message = _phase(jobs, workers)
    ready = 0 if phase == "Suspended" else min(workers, reading.ready_workers(jobs))
    status = Status(
        phase=phase,
        reason=reason,
        message=message,
        restarts=sum(replacements(pods).values()),
        start_time=_earliest(reading.job_start_time(j) for j in jobs),
        completion_time=(
            _latest(reading.job_end_time(j) for j in jobs)
            if phase in ("Succeeded", "Failed")
            else None
        ),
    )
    return with_preemptions(with_workers(status, ready, workers), pods)


def with_workers(status: Status, ready: int, total: int) -> Status:
    return dataclasses.replace(
        status, workers=f"{ready}/{total}", workers_ready=ready, workers_total=total
    )


def with_preemptions(status: Status, pods: Iterable[Obj]) -> Status:
    """`status` with the preemptions `pods` rode out (`reading.preemption_events`)."""
    events = reading.preemption_events(reading.preempted_exits(pods))
    if not events:
        return dataclasses.replace(
            status, preemptions=0, last_preemption_time=None, resumed_at_step=None
        )
    latest = events[-1]
    steps = [e.step for e in latest if e.step is not None]
    return dataclasses.replace(
        status,
        preemptions=len(events),
        last_preemption_time=format_time(latest[0].finished),
        resumed_at_step=steps[0] if steps else None,
    )


def replacements(pods: Iterable[Obj]) -> dict[int, int]:
    """Per worker index, its pods replaced after a failure: every pod but the one that
    stands for the worker (`newest_first`), less those that saved and exited EXIT_PREEMPTED
    (a preemption, which the Job does not count against its backoffLimit)."""
    by_index: dict[int, list[Obj]] = {}
    for pod in pods:
        index = reading.pod_index(pod)
        if index is not None:
            by_index.setdefault(index, []).append(pod)
    counts = {}
    for index, group in by_index.items():
        replaced = newest_first(group)[1:]
        counts[index] = sum(1 for p in replaced if not reading.preempted(p))
    return counts


def newest_first(pods: Iterable[Obj]) -> list[Obj]:
    """A worker's pods, the one that stands for it first (the newest not being deleted,
    else the newest), then the others, newest first."""
    ordered = sorted(pods, key=lambda p: (created_at(p) or EPOCH, reading.name(p)), reverse=True)
    live = [p for p in ordered if not reading.terminating(p)]
    head = (live or ordered)[:1]
    return [*head, *(p for p in ordered if p not in head)]


def _phase(jobs: Sequence[Obj], workers: int) -> tuple[Phase | None, str, str]:
    if not jobs:
        return None, "", ""
    if reading.group_succeeded(jobs, workers=workers):  # chief: whatever the others did after
        return "Succeeded", "Complete", _succeeded(jobs, workers)
    for job in jobs:
        failed = reading.job_failed(job)
        if failed is not None:
            reason = str(failed.get("reason") or "Failed")
            message = " ".join(str(failed.get("message") or "").split())
            where = f"Job {reading.name(job)}" if len(jobs) > 1 else ""
            return "Failed", reason, ": ".join(part for part in (where, message) if part)
    if any(reading.job_suspended(j) for j in jobs):
        return "Suspended", "Suspended", "the Jobs are suspended (e.g. queued by Kueue)"
    return readiness(min(workers, reading.ready_workers(jobs)), workers)


def _succeeded(jobs: Sequence[Obj], workers: int) -> str:
    if reading.success_policy(jobs) == "chief":
        return "the chief (worker 0) succeeded (successPolicy: chief)"
    return f"all {workers} workers succeeded"


def readiness(ready: int, total: int) -> tuple[Phase, str, str]:
    """(phase, reason, message) of a group that has neither finished nor been suspended:
    Running once all `total` workers are ready (MWMS trains only then), else Created."""
    if total and ready >= total:
        return "Running", ALL_READY, f"all {total} workers are ready"
    return "Created", WAITING, f"waiting for the workers: {ready}/{total} ready"


def _earliest(times: Iterable[datetime.datetime | None]) -> str | None:
    found = [t for t in times if t is not None]
    return format_time(min(found)) if found else None


def _latest(times: Iterable[datetime.datetime | None]) -> str | None:
    found = [t for t in times if t is not None]
    return format_time(max(found)) if found else None
