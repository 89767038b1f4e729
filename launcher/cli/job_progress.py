"""Where a job's training stands, for `tflaunch wait` and `status`.

Two sources: when the operator runs the job, its MultiWorkerJob's `status.progress`, which
the operator refreshes from the chief's log every 30 s (`launcher.cli.operator_jobs` reads
the resource anyway); otherwise the tail of the chief pod's own log, read for its last
`TFLAUNCH_PROGRESS` line. Progress is informative: a log that cannot be read (none on the
node, no RBAC for pods/log) gives none, never an error.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from launcher.cluster import status as status_lib
from launcher.core import documents, in_place, timestamps
from launcher.core import progress as progress_lib
from launcher.core.errors import ClusterError
from launcher.core.progress import Progress

if TYPE_CHECKING:
    from launcher.cluster.client import Cluster

LOG_TAIL_LINES = 200
REFRESH_SECONDS = 15.0
"""How often `wait` reads the progress again (a log read or one GET)."""


@dataclasses.dataclass(frozen=True)
class Seen:
    """A job's latest progress and where it came from."""

    progress: Progress
    source: str
    """`status.progress` (the operator's copy) or `the chief's log`."""
    updated: datetime.datetime | None = None
    """When the operator read it (status.progress only)."""

    def words(self, now: datetime.datetime) -> str:
        """`epoch 2/5, step 120/469, loss 0.1234, 3456 images/s, ETA 1m20s (status.progress,
        12s ago)`."""
        text = progress_lib.describe(self.progress)
        if self.updated is not None:
            return f"{text} ({self.source}, {status_lib.age(self.updated, now)} ago)"
        return f"{text} ({self.source})"

    def short(self) -> str:
        """`epoch 2/5 step 120/469 ETA 1m20s`: for the one-line progress of `wait`."""
        p = self.progress
        text = f"epoch {p.epoch}/{p.epochs} step {p.step}/{p.steps}"
        if p.eta_seconds is not None:
            text += f" ETA {progress_lib.duration(p.eta_seconds)}"
        return text


def from_resource(resource: Mapping[str, Any] | None) -> Seen | None:
    """The progress in a MultiWorkerJob's status."""
    if resource is None:
        return None
    written = documents.status_from_document(resource.get("status")).progress
    found = documents.to_progress(written)
    if found is None or written is None:
        return None
    return Seen(found, "status.progress", timestamps.parse_time(written.updated))


def from_log(log: str | None) -> Seen | None:
    """The progress in the tail of the chief's log."""
    found = progress_lib.latest((log or "").splitlines())
    return None if found is None else Seen(found, "the chief's log")


STARTED_PHASES = ("Running", "Succeeded", "Failed")
"""A pod in these phases has had its container started, so it has a log."""


def chief_pod(summary: status_lib.JobStatus) -> str | None:
    """Worker 0's newest pod, once its container has started (else it has no log)."""
    chief = next((w for w in summary.workers if w.index == 0), None)
    if chief is None or chief.pod is None or chief.phase not in STARTED_PHASES:
        return None
    return chief.pod


def peer_pod(summary: status_lib.JobStatus) -> str | None:
    """The lowest-index other worker's newest pod with a log: every worker's wrapper writes
    the group's restart lines, so they outlive a chief's pod that is gone (a failed Job
    deletes the pods still running)."""
    peers = sorted((w for w in summary.workers if w.index != 0), key=lambda w: w.index)
    return next((w.pod for w in peers if w.pod and w.phase in STARTED_PHASES), None)


@dataclasses.dataclass(frozen=True)
class Chief:
    """What the tail of the chief's log says: where training stands, and the group's
    restarts in place (spec.restart inPlace: no pod or container counts them)."""

    training: Seen | None = None
    restarts: tuple[in_place.Restart, ...] = ()

    @property
    def restarts_in_place(self) -> int:
        generation = self.training.progress.generation if self.training else None
        return in_place.count(self.restarts, generation)

    def restarts_words(self) -> str | None:
        """`restarts in place: 2; the last: worker 1 was killed by SIGKILL: ...`."""
        count = self.restarts_in_place
        if not count:
            return None
        last = f"; the last: {self.restarts[-1].describe()}" if self.restarts else ""
        return f"restarts in place: {count}{last}"


def with_restarts_in_place(summary: status_lib.JobStatus, chief: Chief) -> status_lib.JobStatus:
    """`summary` with the group's restarts in place as the chief's log says them (`status -o
    json`'s restartsInPlace and lastRestartInPlace)."""
    last = chief.restarts[-1].words() if chief.restarts else None
    return dataclasses.replace(
        summary, restarts_in_place=chief.restarts_in_place, last_restart_in_place=last
    )


def from_chief_log(log: str | None) -> Chief:
    lines = (log or "").splitlines()
    return Chief(from_log(log), tuple(in_place.restarts(lines)))


def read_chief(cluster: Cluster, summary: status_lib.JobStatus) -> Chief:
    """The tail of the chief's log, read once (a job the operator runs shows its
    MultiWorkerJob's status.progress and status.restarts instead: `from_resource`)."""
    from launcher.cluster import logs

    pod = chief_pod(summary)
    peer = None if pod is not None else peer_pod(summary)
    if pod is None and peer is None:
        return Chief()
    try:
        log = logs.pod_log_tail(cluster, pod or str(peer), summary.namespace, LOG_TAIL_LINES)
    except ClusterError:
        return Chief()
    if pod is None:  # a peer's log: its restart lines, not the chief's progress
        return Chief(restarts=tuple(in_place.restarts((log or "").splitlines())))
    return from_chief_log(log)


def latest(cluster: Cluster, summary: status_lib.JobStatus) -> Seen | None:
    """The job's latest progress from the tail of the chief's log (`read_chief`)."""
    return read_chief(cluster, summary).training
