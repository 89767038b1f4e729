"""A Kubeflow TFJob under the operator (`tflaunch operator --tfjobs`): decided here, pure.

A TFJob the operator serves becomes a MultiWorkerJob of the same name that the TFJob owns
(controller ownerReference): converted by `launcher.core.tfjob` and typed and validated by
`launcher.core.load`, the same path as `tflaunch submit TFJOB.yaml`, so it gets exactly the
objects a MultiWorkerJob gets, and the MultiWorkerJob's reconcile (restarts, success,
preemptions) runs it. Deleting the TFJob deletes that MultiWorkerJob and, with it, its Jobs.
The TFJob's status is a mirror a TFJob user reads: its conditions (Created, Running,
Restarting, Suspended, Succeeded, Failed; the current one last, as `kubectl get tfjobs`
shows `.status.conditions[-1:].type`) and replicaStatuses from the pods.

runPolicy.managedBy: a TFJob naming another controller (training-operator's
`kubeflow.org/training-operator`, MultiKueue's) is left alone; one naming
`tfjob.MANAGED_BY` is served; one naming none is served only where the operator was told
that no training-operator runs (`--tfjobs all`).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from launcher.api import identity
from launcher.core import documents, reading, tfjob
from launcher.core.errors import SpecError
from launcher.core.group_status import newest_first
from launcher.core.load import job_from_document
from launcher.core.timestamps import format_time

Serve = Literal["off", "managed", "all"]
"""`tflaunch operator --tfjobs`: none; those whose runPolicy.managedBy is tflaunch's; those
and the ones that name no controller (where no training-operator is installed)."""
GENERATION = "tflaunch.dev/tfjob-generation"
"""On the MultiWorkerJob: the TFJob generation it was converted from (a newer one is applied)."""
_SERVERS = ("kubectl.kubernetes.io/",)
"""Annotation prefixes that clients and the API server write on an object, not its author."""
_ORDER = ("Created", "Suspended", "Running", "Restarting", "Succeeded", "Failed")


@dataclasses.dataclass(frozen=True)
class TFJobPlan:
    """What to do for one TFJob: apply its MultiWorkerJob, write its status (None: as is)."""

    apply: dict[str, Any] | None = None
    status: dict[str, Any] | None = None


def served(resource: Mapping[str, Any], serve: Serve) -> bool:
    """Whether the operator runs this TFJob (runPolicy.managedBy, above)."""
    owner = tfjob.managed_by(resource)
    if serve == "off" or (owner is not None and owner != tfjob.MANAGED_BY):
        return False
    return owner == tfjob.MANAGED_BY or serve == "all"


def decide(
    resource: Mapping[str, Any],
    child: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    now: datetime.datetime,
) -> TFJobPlan:
    """The plan for a served TFJob, given its MultiWorkerJob (None: not created yet) and the
    worker pods. A TFJob tflaunch cannot run is Failed (InvalidSpec) naming the field."""
    meta = reading.meta(resource)
    if reading.terminating(resource):
        return TFJobPlan()
    try:
        wanted = multiworkerjob(resource)
    except SpecError as error:
        status = _failed_status(resource, "InvalidSpec", str(error), now)
        return TFJobPlan(status=None if _same(resource, status) else status)
    if child is not None and not owned_by(child, resource):
        message = (
            f"MultiWorkerJob {meta.get('name')} already exists and does not belong to this "
            "TFJob: delete it, or rename the TFJob"
        )
        status = _failed_status(resource, "NameConflict", message, now)
        return TFJobPlan(status=None if _same(resource, status) else status)
    generation = str(meta.get("generation") or "")
    stale = child is None or reading.annotations_of(child).get(GENERATION) != generation
    status = status_of(resource, child, pods, now)
    return TFJobPlan(
        apply=wanted if stale else None, status=None if _same(resource, status) else status
    )


def owned_by(child: Mapping[str, Any], resource: Mapping[str, Any]) -> bool:
    """Whether the MultiWorkerJob `child` is this TFJob's (its controller ownerReference)."""
    uid = reading.meta(resource).get("uid")
    return any(
        ref.get("kind") == tfjob.TFJOB_KIND and ref.get("uid") == uid and ref.get("controller")
        for ref in reading.owner_references(child)
    )


def multiworkerjob(resource: Mapping[str, Any]) -> dict[str, Any]:
    """The MultiWorkerJob that runs the TFJob, owned by it; raises SpecError naming the first
    field tflaunch cannot carry (or a rule the converted job breaks)."""
    meta = reading.meta(resource)
    written = {k: meta[k] for k in ("name", "namespace", "labels") if k in meta}
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(_SERVERS)
    }
    # What the author wrote, not what the API server added (uid, managedFields, kubectl's
    # last-applied-configuration, which would end up on every pod).
    converted = tfjob.to_multiworkerjob(
        {**resource, "metadata": {**written, "annotations": annotations}}
    )
    converted["metadata"]["namespace"] = meta.get("namespace") or "default"
    job = job_from_document(converted)
    owner = {
        "apiVersion": tfjob.TFJOB_API_VERSION,
        "kind": tfjob.TFJOB_KIND,
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": identity.API_VERSION,
        "kind": identity.KIND,
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "annotations": {GENERATION: str(meta.get("generation") or "")},
            "ownerReferences": [owner],
        },
        "spec": documents.document_of(job.spec),
    }


def status_of(
    resource: Mapping[str, Any],
    child: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    now: datetime.datetime,
) -> dict[str, Any]:
    """The TFJob's status from its MultiWorkerJob's and the worker pods."""
    current = documents.status_from_document((child or {}).get("status"))
    old = {c.get("type"): c for c in reading.status(resource).get("conditions") or []}
    conditions = []
    for condition in sorted(current.conditions, key=lambda c: (c.status == "True", _rank(c))):
        before = old.get(condition.type) or {}
        same = before.get("status") == condition.status and before.get("reason") == (
            condition.reason
        )
        conditions.append(
            {
                "type": condition.type,
                "status": condition.status,
                "reason": condition.reason,
                "message": condition.message,
                "lastTransitionTime": condition.last_transition_time or format_time(now),
                "lastUpdateTime": before.get("lastUpdateTime") if same else format_time(now),
            }
        )
    out: dict[str, Any] = {
        "conditions": conditions,
        "replicaStatuses": replica_statuses(resource, pods),
    }
    if current.start_time:
        out["startTime"] = current.start_time
    if current.completion_time:
        out["completionTime"] = current.completion_time
    return out


def replica_statuses(
    resource: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]
) -> dict[str, dict[str, int]]:
    """Per replica type (Chief or Master for worker 0 when the TFJob has one, else Worker):
    its workers' pods that are active, succeeded and failed (each worker's current pod)."""
    written = (resource.get("spec") or {}).get("tfReplicaSpecs") or {}
    types = {str(k).lower(): str(k) for k in written}
    chief = next((types[c.lower()] for c in tfjob.CHIEFS if c.lower() in types), None)
    worker = types.get("worker", "Worker")
    by_index: dict[int, list[Mapping[str, Any]]] = {}
    for pod in pods:
        index = reading.pod_index(pod)
        if index is not None:
            by_index.setdefault(index, []).append(pod)
    counts: dict[str, dict[str, int]] = {}
    if chief is not None:
        counts[chief] = {"active": 0, "succeeded": 0, "failed": 0}
    if worker in written or chief is None:
        counts[worker] = {"active": 0, "succeeded": 0, "failed": 0}
    for index, group in sorted(by_index.items()):
        kind = chief if chief is not None and index == 0 else worker
        phase = reading.phase(newest_first(group)[0])
        key = {"Succeeded": "succeeded", "Failed": "failed"}.get(phase or "", "active")
        counts.setdefault(kind, {"active": 0, "succeeded": 0, "failed": 0})[key] += 1
    return counts


def _failed_status(
    resource: Mapping[str, Any], reason: str, message: str, now: datetime.datetime
) -> dict[str, Any]:
    old = {c.get("type"): c for c in reading.status(resource).get("conditions") or []}
    before = old.get("Failed") or {}
    stamp = format_time(now)
    same = before.get("status") == "True" and before.get("message") == message
    condition = {
        "type": "Failed",
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": before.get("lastTransitionTime") if same else stamp,
        "lastUpdateTime": before.get("lastUpdateTime") if same else stamp,
    }
    return {"conditions": [condition], "replicaStatuses": {}}


def _rank(condition: Any) -> int:
    return _ORDER.index(condition.type) if condition.type in _ORDER else len(_ORDER)


def _same(resource: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether the TFJob already shows `status` (lastUpdateTime apart)."""

    def plain(value: Mapping[str, Any]) -> Any:
        conditions = [
            {k: v for k, v in c.items() if k != "lastUpdateTime"}
            for c in value.get("conditions") or []
        ]
        return {**value, "conditions": conditions}

    return bool(plain(reading.status(resource)) == plain(status))
