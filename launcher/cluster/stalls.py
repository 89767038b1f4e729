"""Why a job's workers do not start, worked out from its Jobs, Pods and Events as plain dicts.

MultiWorkerMirroredStrategy cannot start until every worker runs, so one worker that does
not start stalls them all. Two ways, each with its warning for `tflaunch wait`: a worker's
pod stays Pending (the scheduler finds no room or no GPUs), or it is never created at all (a
ResourceQuota, a LimitRange or an admission webhook refused it; the Job controller says so in
a condition or a FailedCreate event). Pure, like `launcher.cluster.status`.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence

from launcher.cluster.status import JobStatus, Obj, Worker, duration, first_line
from launcher.core import reading
from launcher.core.never_starts import DeadEnd, dead_end, mount_warning
from launcher.core.reading import COMPLETE, FAILED, true_conditions


def pending_too_long(
    status: JobStatus, now: datetime.datetime, threshold: float
) -> tuple[Worker, ...]:
    """Workers whose pod has been Pending for more than `threshold` seconds."""
    return tuple(
        w
        for w in status.workers
        if w.phase == "Pending"
        and w.created is not None
        and (now - w.created).total_seconds() > threshold
    )


def pending_warning(status: JobStatus, workers: Sequence[Worker], threshold: float) -> str:
    """Why Pending workers stall all of MWMS, and what to do about it: the capacity advice
    only when the scheduler found no room (a pod that is scheduled but waits for its
    container, e.g. ContainerCreating, gets the pod to look at instead)."""
    which = ", ".join(str(w.index) for w in workers)
    reasons = sorted({w.reason for w in workers if w.reason})
    why = f" ({'; '.join(reasons)})" if reasons else ""
    head = (
        f"worker{'s' if len(workers) > 1 else ''} {which} pending for more than "
        f"{duration(threshold)}{why}. MultiWorkerMirroredStrategy cannot start until all "
        f"{status.expected} workers"
    )
    if not any(_unschedulable(w) for w in workers):
        pods = " ".join(w.pod for w in workers if w.pod) or "POD"
        return f"{head} run: kubectl describe pod {pods} -n {status.namespace} says why"
    gpu = any("nvidia.com/gpu" in (w.reason or "") for w in workers)
    scarce = "GPUs are short" if gpu else "the cluster lacks room"
    return (
        f"{head} are scheduled, so the scheduled ones wait idle while {scarce}: free "
        "capacity or ask for "
        "fewer workers/GPUs, or use gang scheduling (spec.gang: kueue, volcano or "
        "coscheduling, so that all workers start together)"
    )


def _unschedulable(worker: Worker) -> bool:
    """Whether the scheduler has not placed the worker's pod (no node, no reason yet)."""
    return worker.node is None or (worker.reason or "").startswith("Unschedulable")


def dead_ends(status: JobStatus) -> tuple[tuple[Worker, DeadEnd, str], ...]:
    """Workers whose container waits on something that will not come (`never_starts`),
    with the kubelet's message."""
    found = []
    for worker in status.workers:
        if worker.phase not in ("Pending", "Running") or not worker.reason:
            continue
        reason, _, message = worker.reason.partition(": ")
        message = worker.waiting or message  # the whole of it: its verdict comes last
        end = dead_end(reason, message)
        if end is not None:
            found.append((worker, end, message))
    return tuple(found)


def creating(status: JobStatus) -> tuple[str, ...]:
    """The pods whose container waits in ContainerCreating: a volume that does not mount
    shows only in the pod's events (`with_pod_warnings`)."""
    return tuple(
        w.pod
        for w in status.workers
        if w.pod and w.phase == "Pending" and (w.reason or "").startswith("ContainerCreating")
    )


def with_pod_warnings(status: JobStatus, events: Mapping[str, Sequence[Obj]]) -> JobStatus:
    """`status` with a ContainerCreating worker's reason taken from its pod's newest
    FailedMount or FailedAttachVolume event (`events` by pod name), so that `dead_ends`
    reads it like a container's waiting reason."""
    workers = []
    stuck = creating(status)
    for worker in status.workers:
        found = mount_warning(events.get(worker.pod or "", ()))
        if found and worker.pod in stuck:
            reason = f"{found[0]}: {first_line(found[1], limit=400)}"
            worker = dataclasses.replace(worker, reason=reason)
        workers.append(worker)
    return dataclasses.replace(status, workers=tuple(workers))


@dataclasses.dataclass(frozen=True)
class Shortfall:
    """A Job that has fewer live pods than it should run now (`parallelism`, or what is left
    of its completions): the Job controller could not create the others."""

    job: str
    want: int
    have: int
    failed: int
    """The Job's failed pods so far: the controller may only be backing off before the next."""


def missing_pods(jobs: Sequence[Obj], pods: Sequence[Obj]) -> tuple[Shortfall, ...]:
    """The Jobs, neither finished nor suspended, with fewer live pods than they should run.

    Such workers never get a pod at all, so they are never Pending: a ResourceQuota, a
    LimitRange or an admission webhook refused their creation.
    """
    live: dict[str, int] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        phase = reading.phase(pod)
        if meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
            continue
        for owner in meta.get("ownerReferences") or []:
            if owner.get("kind") == "Job":
                live[owner.get("uid", "")] = live.get(owner.get("uid", ""), 0) + 1
    shortfalls = []
    for job in jobs:
        spec, job_status = job.get("spec") or {}, job.get("status") or {}
        if spec.get("suspend") or _job_finished(job):
            continue
        left = int(spec.get("completions") or 1) - int(job_status.get("succeeded") or 0)
        want = min(int(spec.get("parallelism") or 1), left)
        have = live.get(job["metadata"].get("uid", ""), 0)
        if have < want:
            failed = int(job_status.get("failed") or 0)
            shortfalls.append(Shortfall(job["metadata"]["name"], want, have, failed))
    return tuple(shortfalls)


def _job_finished(job: Obj) -> bool:
    conditions = true_conditions(job)
    return any(kind in conditions for kind in (*FAILED, *COMPLETE))


def creation_blocked_by(job: Obj, events: Sequence[Obj]) -> str | None:
    """Why the Job controller cannot create a Job's pods, in the server's words: a true
    condition's message (other than the Job's verdict), else its newest FailedCreate (or
    other Warning) event, e.g. `pods "..." is forbidden: exceeded quota: ...`."""
    for kind, condition in true_conditions(job).items():
        if kind not in (*FAILED, *COMPLETE, "Suspended") and condition.get("message"):
            return first_line(f"{kind}: {condition['message']}", limit=400)
    warnings = [e for e in events if e.get("type") == "Warning"]
    created = [e for e in warnings if e.get("reason") == "FailedCreate"] or warnings
    if not created:
        return None
    event = created[-1]
    return first_line(f"{event.get('reason')}: {event.get('message')}", limit=400)


def missing_warning(shortfall: Shortfall, threshold: float, cause: str | None) -> str:
    """Why workers without a pod stall all of MWMS, with the server's reason."""
    why = cause or f"no event says why; kubectl describe job {shortfall.job}"
    return (
        f"Job {shortfall.job} has {shortfall.have} of {shortfall.want} worker pods for more "
        f"than {duration(threshold)}: the others cannot be created ({why}). "
        "MultiWorkerMirroredStrategy cannot start without all of them: raise the quota or "
        "limits, or ask for fewer workers/resources"
    )
