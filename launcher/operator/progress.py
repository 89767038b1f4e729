"""status.progress: the chief's latest `TFLAUNCH_PROGRESS` line, copied into the
MultiWorkerJob's status so that `kubectl get mwj` (Epoch, ETA) and `tflaunch wait`/`status`
show where training stands.

Pure. The operator has no pod watch and the chief's log is the only source, so while a group
runs a reconcile reads the tail of the chief's log at most every PROGRESS_REFRESH_SECONDS
(the plan's requeue brings the next look): one log read and one status write per running job
per half minute, whatever the job's size.
"""

from __future__ import annotations

import dataclasses
import datetime

from launcher.api.spec import JobSpec
from launcher.core import progress as progress_lib
from launcher.core import reading, restart, typed
from launcher.core.documents import to_progress as to_progress
from launcher.core.errors import SpecError
from launcher.core.timestamps import format_time, parse_time
from launcher.operator.crd import ProgressStatus, Status
from launcher.operator.objects import chief_pod, name_of, terminating
from launcher.operator.observe import Observed, owned

PROGRESS_REFRESH_SECONDS = 30.0


def due(old: Status, now: datetime.datetime) -> bool:
    """Whether status.progress is missing or older than PROGRESS_REFRESH_SECONDS."""
    updated = parse_time(old.progress.updated) if old.progress else None
    return updated is None or (now - updated).total_seconds() >= PROGRESS_REFRESH_SECONDS


def log_wanted(observed: Observed, old: Status) -> str | None:
    """The chief pod whose log to read for progress now, else None: only while the group
    runs (phase Running, the chief's pod Running) and the last read is old enough. For a
    group that restarts in place also at once when a worker pod has ended (failed: the
    budget may be spent; succeeded: the job may be), whatever the chief's pod's phase: its
    log has the restarts in place since the last read, which the decision counts."""
    if old.phase != "Running":
        return None
    _, pods = owned(observed)
    live = [p for p in pods if not terminating(p)]
    chief = chief_pod(live)
    if chief is None:
        return None
    if _in_place(observed.resource) and any(reading.ended(p) for p in live):
        return name_of(chief) if reading.phase(chief) != "Pending" else None
    if not due(old, observed.now) or reading.phase(chief) != "Running":
        return None
    return name_of(chief)


def _in_place(resource: reading.Obj) -> bool:
    """Whether the job restarts in place (`launcher.core.restart`), from its spec as stored;
    a spec that does not type is the decision's to report, not this read's."""
    try:
        return restart.in_place(typed.build(JobSpec, reading.spec(resource), "spec"))
    except SpecError:
        return False


def from_log(log: str | None, now: datetime.datetime) -> ProgressStatus | None:
    """The status.progress for the latest progress line in a log tail, stamped `now`."""
    found = progress_lib.latest((log or "").splitlines())
    if found is None:
        return None
    eta = found.eta_seconds
    return ProgressStatus(
        epoch=found.epoch,
        epochs=found.epochs,
        step=found.step,
        steps=found.steps,
        loss=found.loss,
        eta_seconds=eta,
        images_per_sec=found.images_per_sec,
        updated=format_time(now),
        epoch_text=f"{found.epoch}/{found.epochs}",
        eta=progress_lib.duration(eta) if eta is not None else "",
    )


def refreshed(
    status: Status | None,
    old: Status,
    log: str | None,
    now: datetime.datetime,
    requeue_after: float | None,
) -> tuple[Status | None, float | None]:
    """A plan's status and requeue with the progress of a log tail read for it: the status
    gets the chief's latest progress (None stays "unchanged" when there is none), and while
    the group runs the next look comes within PROGRESS_REFRESH_SECONDS (no pod watch would
    say that training moved)."""
    found = from_log(log, now)
    if found is not None:
        status = dataclasses.replace(status or old, progress=found)
    if (status or old).phase != "Running":
        return status, requeue_after
    return status, min(requeue_after or PROGRESS_REFRESH_SECONDS, PROGRESS_REFRESH_SECONDS)
