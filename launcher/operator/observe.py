"""Step 1 of a reconcile, observe: the MultiWorkerJob, the Jobs and pods it owns, and what the
decisions need to know about them.

The API is read by `launcher.operator.controller`; everything here is pure. Children are
matched by ownerReference uid, not only by labels: a Job submitted with `tflaunch submit`
under the same name carries the same labels and must be neither restarted nor counted.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from launcher.api import spec as spec_model
from launcher.core import names
from launcher.core.reading import ended, group_succeeded, terminated, trainer_container
from launcher.operator import crd
from launcher.operator.children import spec_hash
from launcher.operator.conditions import finished
from launcher.operator.crd import Status
from launcher.operator.objects import (
    chief_pod,
    meta_of,
    name_of,
    owned_by,
    parse_result,
    terminating,
)
from launcher.operator.tenancy import Allowlist

LOG_TAIL_LINES = 200
"""How much of the chief's log to read for its result line (it is printed last)."""


@dataclasses.dataclass(frozen=True)
class Observed:
    """One MultiWorkerJob and what it owns, as read from the API."""

    resource: Mapping[str, Any]
    """The MultiWorkerJob: metadata (name, namespace, uid, generation), spec, status."""
    jobs: Sequence[Mapping[str, Any]] = ()
    """Its child Jobs (owned by it), including ones being deleted."""
    pods: Sequence[Mapping[str, Any]] = ()
    """The pods of those Jobs."""
    now: datetime.datetime = dataclasses.field(
        default_factory=lambda: datetime.datetime.now(datetime.timezone.utc)
    )
    chief_log: str | None = None
    """The tail of the chief pod's log, when `chief_log_wanted()` asked for it."""
    others: Sequence[Mapping[str, Any]] | None = None
    """The job's Services and NetworkPolicies (by its label), so that one deleted while the
    group runs is created again; None: not looked at (nothing is restored)."""
    policy: Allowlist = dataclasses.field(default_factory=Allowlist)
    """What the spec may ask the scheduler for (the operator's `--allowed-...` lists)."""
    blocked: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Per Job that has fewer pods than it should run: why the Job controller cannot create
    them, in the server's words (a FailedCreate event: a ResourceQuota, a webhook)."""
    pod_warnings: Mapping[str, Sequence[Mapping[str, Any]]] = dataclasses.field(
        default_factory=dict
    )
    """The Warning events of its pods whose trainer waits in ContainerCreating, by pod name:
    a volume that does not mount says so only there (FailedMount)."""
    workloads: Sequence[Mapping[str, Any]] | None = None
    """Kueue's Workloads of the Jobs it holds back (queued and suspended), read only while it
    holds some; None: none held, or they cannot be read (no Kueue CRDs, no RBAC)."""


def orphaned_pods(observed: Observed) -> list[str]:
    """Pods with the job's label that no Job it has (its own or another's) owns, and that
    have not ended: left behind by `kubectl delete job --cascade=orphan` (or not yet
    collected). A new worker group beside them would give each worker name two pods."""
    job_uids = {str(meta_of(j).get("uid")) for j in observed.jobs if meta_of(j).get("uid")}
    return sorted(name_of(p) for p in observed.pods if not ended(p) and not owned_by(p, job_uids))


def owned(observed: Observed) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """The Jobs this resource controls, and those Jobs' pods (by ownerReference uid).

    Label selectors alone are not enough: a Job submitted with `tflaunch submit` under the
    same name carries the same labels, and must be neither restarted nor counted.
    """
    uid = str(meta_of(observed.resource).get("uid") or "")
    jobs = [j for j in observed.jobs if uid and owned_by(j, [uid])]
    job_uids = [str(meta_of(j).get("uid")) for j in jobs if meta_of(j).get("uid")]
    pods = [p for p in observed.pods if owned_by(p, job_uids)]
    return jobs, pods


def creating_pods(observed: Observed) -> list[str]:
    """Its pods whose trainer container waits in ContainerCreating (`Observed.pod_warnings`)."""
    _, pods = owned(observed)
    return [name_of(p) for p in pods if not terminating(p) and _waiting(p) == "ContainerCreating"]


def _waiting(pod: Mapping[str, Any]) -> str | None:
    waiting = ((trainer_container(pod) or {}).get("state") or {}).get("waiting") or {}
    return waiting.get("reason")


def chief_log_wanted(observed: Observed) -> str | None:
    """The chief pod whose log holds the result, when the job just succeeded; else None.

    The result is read once, on the transition to Succeeded, and only if the chief's
    termination message does not already carry it.
    """
    old = crd.status_from_document(observed.resource.get("status"))
    if finished(old):
        return None
    jobs, pods = owned(observed)
    live = [j for j in jobs if not terminating(j)]
    if not group_succeeded(live, workers=len(live)):
        return None
    chief = chief_pod(pods)
    if chief is None or parse_result((terminated(chief) or {}).get("message")) is not None:
        return None
    return name_of(chief)


@dataclasses.dataclass(frozen=True)
class Group:
    """A valid, unfinished MultiWorkerJob and the worker group it owns, as the decision steps
    in `launcher.operator.reconcile` read it."""

    observed: Observed
    job: spec_model.MultiWorkerJob
    """The resource's spec, typed and validated."""
    old: Status
    """The status as read."""
    status: Status
    """`old` with this generation observed: what every decision starts from."""
    jobs: Sequence[Mapping[str, Any]]
    """The Jobs it owns, including ones being deleted."""
    live: Sequence[Mapping[str, Any]]
    """The Jobs it owns that are not being deleted."""
    pods: Sequence[Mapping[str, Any]]
    """The pods of the live Jobs."""
    hash: str
    """`spec_hash` of the spec: a live Job with another one was rendered from an older spec."""
    job_names: Sequence[str]
    """The names of the Jobs the spec asks for."""

    @property
    def now(self) -> datetime.datetime:
        return self.observed.now

    @property
    def workers(self) -> int:
        return self.job.spec.workers


def observe(
    observed: Observed,
    job: spec_model.MultiWorkerJob,
    old: Status,
    jobs: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
) -> Group:
    """The `Group` of an observed resource, its typed spec and status, and what `owned()` found."""
    generation = meta_of(observed.resource).get("generation")
    live = [j for j in jobs if not terminating(j)]
    live_uids = [str(meta_of(j).get("uid")) for j in live]
    return Group(
        observed=observed,
        job=job,
        old=old,
        status=dataclasses.replace(old, observed_generation=generation),
        jobs=list(jobs),
        live=live,
        pods=[p for p in pods if owned_by(p, live_uids)],
        hash=spec_hash(job),
        job_names=(
            [names.indexed_job_name(job.name)]
            if job.spec.layout == "indexed"
            else [names.per_worker_job_name(job.name, i) for i in range(job.spec.workers)]
        ),
    )
