"""Writing a job: server-side apply of its objects, all or nothing, and deleting it.

Why all or nothing: a job is several objects (Service, NetworkPolicy, Jobs) that only work
together, and a Job's pod template is immutable. So every object is first checked by the
API server (a dry-run apply, or a dry-run create under `--replace`) before anything is
written; objects of another owner are refused (`Conflict`), a changed pod template too
(`SpecChanged`, with the way out), and so is an object of the job (found by its label) that
the new render lacks, e.g. the Job of another layout. Applying the same spec twice writes
nothing, and never flips `suspend` that someone else changed since (`_settle_suspend`). The
Service and NetworkPolicy are then owned by the (first) Job, so deleting the Job, or its
TTL, removes them too.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeVar

from launcher.cluster import operated
from launcher.cluster.client import Cluster, Obj, kind_key
from launcher.cluster.find import job_objects
from launcher.cluster.retry import retrying
from launcher.cluster.watch import wait_gone
from launcher.core import exit_policy, labels, names, reading
from launcher.core.errors import ClusterError, Conflict, Invalid, NotFound, SpecChanged

_T = TypeVar("_T")


def create_object(cluster: Cluster, obj: Obj) -> Obj | None:
    """Create one object as given (owner references included); None when the name is taken."""
    try:
        return _without_refused_restart_rules(cluster.create, obj)
    except Conflict:
        return None


def _without_refused_restart_rules(write: Callable[[Any], _T], obj: Any) -> _T:
    """`write(obj)`; a Job whose container restart rules the API server refuses (Kubernetes
    1.28 to 1.33) is written again without them, as a newer server with ContainerRestartRules
    off stores it: a killed container then fails its pod, which is recreated, and submit,
    reading the stored Job back, says so once. `obj` is changed in place, so that what is
    written after a dry run is what the dry run accepted."""
    try:
        return write(obj)
    except Invalid as error:
        refused = obj.get("kind") == "Job" and exit_policy.restart_rules_refused(str(error))
        if not (refused and exit_policy.drop_container_restart_rules(obj)):
            raise
    return write(obj)


@dataclasses.dataclass(frozen=True)
class Applied:
    """What `apply_job` did to one object."""

    kind: str
    name: str
    action: Literal["created", "configured", "unchanged", "replaced", "deleted"]


def apply_job(
    cluster: Cluster,
    objects: Sequence[Obj],
    *,
    replace: bool = False,
    dry_run: bool = False,
    program: str = "tflaunch",
) -> list[Applied]:
    """Apply a job's rendered objects all-or-nothing; returns what happened to each.

    Every object is first checked against the server (a dry-run server-side apply, or a
    dry-run create under `replace`); only when all of them pass is anything written, so a
    refused change leaves the cluster as it was. An existing Job whose pod template would
    change is refused with `SpecChanged` (it is immutable). With `replace` the job's old
    objects are deleted first (foreground, waiting until they are gone). Objects that
    already match are not written at all, so applying the same spec twice is a no-op.
    Afterwards the Service and NetworkPolicy are owned by the (first) Job, so deleting the
    Job, or its TTL, removes them too.

    Args:
        objects: `render.render(job)`'s output: Service, NetworkPolicy, Job(s).
        replace: delete the job's existing objects, then create them anew.
        dry_run: run every check, report what would happen, change nothing.
        program: how the user calls tflaunch, for the hints in messages.
    """
    objects = [copy.deepcopy(o) for o in objects]
    replaced: set[tuple[str, str]] = set()
    job_name, namespace = _job_identity(objects)
    owner_name = _owner_name(objects, job_name)
    existing = {
        _key(o): cluster.get(kind_key(o), o["metadata"]["name"], namespace) for o in objects
    }
    operated.refuse_if_operated(cluster, job_name, namespace, existing.values(), program)
    _check_ownership(job_name, namespace, existing, program)
    stale = _stale_objects(cluster, job_name, namespace, objects)
    if stale and not replace:
        raise _not_in_render(job_name, namespace, stale, program)
    if not replace:  # --replace deletes them with the rest (delete_job)
        _refuse_orphans(cluster, job_name, namespace, program)
    for obj in objects:
        if obj["kind"] == "Job":
            _settle_suspend(obj, None if replace else existing[_key(obj)])
    if replace:
        for obj in objects:
            if existing[_key(obj)] is None:
                _without_refused_restart_rules(functools.partial(_dry_apply, cluster), obj)
            else:
                _without_refused_restart_rules(functools.partial(_dry_create, cluster), obj)
        replaced = {key for key, obj in existing.items() if obj is not None}
        gone = [Applied(*_key(o), "deleted") for o in stale]
        if dry_run:
            return gone + [
                Applied(*_key(o), "replaced" if _key(o) in replaced else "created") for o in objects
            ]
        delete_job(cluster, job_name, namespace, wait=True)
        existing = dict.fromkeys(existing)
    owner = existing.get(("Job", owner_name))
    if owner is not None:
        _set_owner(objects, owner)
    results = _dry_run_all(cluster, objects, existing, job_name, program)
    if dry_run:
        return [
            Applied(o["kind"], o["metadata"]["name"], a)
            for o, a in zip(objects, results, strict=True)
        ]
    applied: list[Applied] = [Applied(*_key(o), "deleted") for o in stale] if replace else []
    try:
        for obj, action in zip(objects, results, strict=True):
            if action != "unchanged":
                result = cluster.apply(obj)
                if obj["kind"] == "Job" and obj["metadata"]["name"] == owner_name:
                    owner = result
            if replace and _key(obj) in replaced:
                action = "replaced"
            applied.append(Applied(obj["kind"], obj["metadata"]["name"], action))
        if owner is not None:
            for obj in objects:
                if obj["kind"] != "Job" and not obj["metadata"].get("ownerReferences"):
                    _set_owner([obj], owner)
                    cluster.apply(obj)
    except ClusterError as error:
        raise _partially_applied(error, applied, objects, job_name, program) from None
    return applied


class PartiallyApplied(ClusterError):
    """Writing a job's objects failed midway: some are on the server, some are not."""


def _partially_applied(
    error: ClusterError, applied: Sequence[Applied], objects: Sequence[Obj], job: str,
    program: str,
) -> ClusterError:  # fmt: skip
    """`error`, saying what was written before it and that the same submit converges."""
    written = [a for a in applied if a.action != "unchanged"]
    if not written:
        return error  # nothing changed on the server: the error as it is
    done = {(a.kind, a.name) for a in applied}
    missing = [f"{o['kind']} {o['metadata']['name']}" for o in objects if _key(o) not in done]
    names_written = ", ".join(f"{a.kind} {a.name}" for a in written[:5])
    more = f" and {len(written) - 5} more" if len(written) > 5 else ""
    left = (
        f"; not yet: {len(missing)} ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})"
    )
    return PartiallyApplied(
        f"{error}. Job {job} is half-submitted: written before the failure: {names_written}"
        f"{more}{left if missing else ''}. Run the same `{program} submit` again once the "
        f"API server answers: it writes only what is missing (or `{program} delete "
        f"{job}` to remove what was written)"
    )


def _check_ownership(
    job: str, namespace: str, existing: dict[tuple[str, str], Obj | None], program: str
) -> None:
    for (kind, name), obj in existing.items():
        if obj is None:
            continue
        owner = reading.labels_of(obj).get(labels.JOB_NAME)
        if owner != job:
            whose = f"tflaunch job {owner}" if owner else "something other than tflaunch"
            raise Conflict(
                f"{kind} {name} already exists in namespace {namespace} and belongs to "
                f"{whose}; choose another job name (--name), or delete it "
                f"(kubectl delete {kind.lower()} {name} -n {namespace})"
            )


STALE_KINDS = ("Job", "Service", "NetworkPolicy")
"""What a job's render consists of; one of these that the new render lacks is in the way."""


def _stale_objects(cluster: Cluster, job: str, namespace: str, objects: Sequence[Obj]) -> list[Obj]:
    """The job's objects on the server (found by its label, not by the names about to be
    rendered) that the new render does not contain: a Job of the previous layout or of a
    worker that no longer exists. Left running, its pods would share host names under the
    one Service with the new group's, and DNS could hand TensorFlow the wrong pod."""
    rendered = {_key(o) for o in objects}
    selector = labels.job_selector_string(job)
    return [
        obj
        for kind in STALE_KINDS
        for obj in cluster.list_objects(kind, namespace, selector)
        if _key(obj) not in rendered
    ]


def _not_in_render(job: str, namespace: str, stale: Sequence[Obj], program: str) -> SpecChanged:
    listed = ", ".join(f"{kind} {name}" for kind, name in map(_key, stale))
    return SpecChanged(
        f"job {job} already exists in namespace {namespace} with objects the new spec does "
        f"not render ({listed}: a changed layout or worker count), which would run beside "
        f"the new workers; nothing was applied; use --replace to delete them first, or "
        f"{program} delete {job} -n {namespace}"
    )


class OrphanedPods(SpecChanged):
    """Pods of the job run without their Job: a new group would run beside them."""


def _refuse_orphans(cluster: Cluster, job: str, namespace: str, program: str) -> None:
    """Refuse while pods of the job (by its label) that no Job owns have not ended: left by
    `kubectl delete job --cascade=orphan`, they keep the workers' hostnames, and a new
    group beside them would give each worker name two pods (two addresses in DNS)."""
    selector = labels.job_selector_string(job)
    uids = {j["metadata"].get("uid") for j in cluster.list_objects("Job", namespace, selector)}
    orphans = sorted(
        pod["metadata"]["name"]
        for pod in cluster.list_objects("Pod", namespace, selector)
        if not reading.ended(pod)
        and not any(o.get("uid") in uids for o in reading.owner_references(pod))
    )
    if orphans:
        shown = ", ".join(orphans[:3]) + (
            f" and {len(orphans) - 3} more" if len(orphans) > 3 else ""
        )
        raise OrphanedPods(
            f"job {job} has {len(orphans)} pod(s) in namespace {namespace} that run without "
            f"their Job ({shown}; e.g. after kubectl delete job --cascade=orphan): new "
            f"workers beside them would share their hostnames; nothing was applied; use "
            f"--replace to delete them first, or {program} delete {job} -n {namespace}"
        )


def _settle_suspend(job: Obj, current: Obj | None) -> None:
    """Decide the `suspend` that applying `job` writes, so that resubmitting never fights
    whoever suspended or resumed the running Job since (Kueue admitting or preempting it, a
    person with kubectl).

    A new Job gets the spec's `suspend`. For an existing one the user changed spec.suspend
    *on purpose* exactly when it differs from what tflaunch last applied, which the Job
    carries in the annotation `labels.SUSPEND_REQUESTED` (written with every apply, so it is
    part of tflaunch's own applied configuration). Only then is it written; otherwise the
    Job's live value is applied back unchanged: leaving the field out is no option, since
    server-side apply would remove a field tflaunch owned and so resume the Job. managedFields
    cannot answer the question: they record who owns `spec.suspend`, not the value tflaunch
    applied. A Job without the annotation (from an older tflaunch) keeps its live value.
    """
    requested = bool(job["spec"].get("suspend"))
    job["metadata"].setdefault("annotations", {})[labels.SUSPEND_REQUESTED] = _bool_text(requested)
    if current is None:
        return
    last = reading.annotations_of(current).get(labels.SUSPEND_REQUESTED)
    if last is None or last == _bool_text(requested):
        job["spec"]["suspend"] = bool(reading.spec(current).get("suspend"))


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def _dry_run_all(
    cluster: Cluster,
    objects: Sequence[Obj],
    existing: dict[tuple[str, str], Obj | None],
    job: str,
    program: str,
) -> list[Literal["created", "configured", "unchanged", "replaced"]]:
    actions: list[Literal["created", "configured", "unchanged", "replaced"]] = []
    changed_jobs: list[str] = []
    for obj in objects:
        current = existing[_key(obj)]
        try:
            result = _without_refused_restart_rules(functools.partial(_dry_apply, cluster), obj)
        except NotFound as error:
            if current is None and obj["kind"] not in STALE_KINDS:
                raise not_served(obj) from error
            raise
        except Invalid as error:
            if current is not None and obj["kind"] == "Job":
                why = str(error).partition(": ")[2] or str(error)
                changed_jobs.append(f"{obj['metadata']['name']}: {why}")
                continue
            raise
        if current is None:
            actions.append("created")
        elif _comparable(current) == _comparable(result):
            actions.append("unchanged")
        elif obj["kind"] == "Job" and _template(current) != _template(result):
            changed_jobs.append(obj["metadata"]["name"])
        else:
            actions.append("configured")
    if changed_jobs:
        ns = objects[0]["metadata"].get("namespace") or cluster.namespace
        raise SpecChanged(
            f"job {job} already exists in namespace {ns} with a different spec, and a "
            f"Job's pod template cannot change (Job {'; '.join(changed_jobs)}); nothing was "
            f"applied; delete it first ({program} delete {job} -n {ns}), or use --replace"
        )
    return actions


def _dry_apply(cluster: Cluster, obj: Obj) -> Obj:
    return cluster.apply(obj, dry_run=True)


def _dry_create(cluster: Cluster, obj: Obj) -> Obj | None:
    return cluster.create_dry_run(_for_create(obj))


def not_served(obj: Obj) -> NotFound:
    """A gang scheduler's object whose CRD the cluster lacks (`launcher.core.gang`); the
    operator says the same when it cannot apply a MultiWorkerJob's PodGroup."""
    return NotFound(
        f"{obj['kind']} ({obj['apiVersion']}) is not served by this cluster: spec.gang needs "
        "its scheduler's CRDs installed (Volcano, or scheduler-plugins' Coscheduling); install "
        "them or set spec.gang: none; nothing was applied"
    )


def delete_job(
    cluster: Cluster,
    name: str,
    namespace: str | None = None,
    *,
    wait: bool = True,
    timeout: float = 300,
) -> list[str]:
    """Delete every object of job `name` with foreground propagation, so its pods go
    first; idempotent. Returns `kind/name` of everything that was there ([] for nothing;
    some may have been removed by the garbage collector along with their owner).

    Args:
        wait: return only once every object (and pod) is gone.
        timeout: how long to wait, in seconds.
    """
    ns = cluster.ns(namespace)
    deadline = time.monotonic() + timeout
    found = job_objects(cluster, name, ns)  # fails at once when the server was never reached
    deleted = []
    for obj in [*found.jobs, *found.services, *found.network_policies, *found.pods]:
        meta = obj["metadata"]
        deleted.append(f"{obj['kind'].lower()}/{meta['name']}")
        if not meta.get("deletionTimestamp"):
            # False: the GC was quicker. An outage from here on is waited out (`retrying`).
            delete = functools.partial(cluster.delete, obj["kind"], meta["name"], ns)
            retrying(delete, cluster.outage, deadline=deadline)
    if wait and found.exists:
        wait_gone(cluster, name, ns, timeout=max(0.0, deadline - time.monotonic()))
    return deleted


def _key(obj: Obj) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _job_identity(objects: Sequence[Obj]) -> tuple[str, str]:
    if not objects:
        raise ValueError("no objects to apply")
    meta = objects[0]["metadata"]
    job = (meta.get("labels") or {}).get(labels.JOB_NAME)
    if not job:
        raise ValueError(f"{objects[0]['kind']} {meta['name']} has no {labels.JOB_NAME} label")
    return str(job), str(meta.get("namespace") or "default")


def _owner_name(objects: Sequence[Obj], job: str) -> str:
    """The Job that owns the Service and NetworkPolicy: the indexed Job, or worker 0's."""
    jobs = [o["metadata"]["name"] for o in objects if o["kind"] == "Job"]
    if names.indexed_job_name(job) in jobs:
        return names.indexed_job_name(job)
    return names.per_worker_job_name(job, 0)


def _set_owner(objects: Iterable[Obj], owner: Obj) -> None:
    """Make the job's Service and NetworkPolicy dependents of `owner` (a Job), so that the
    garbage collector deletes them with it. Not a controller reference, and it does not block
    the owner's deletion (that would need RBAC on jobs/finalizers)."""
    reference = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": False,
        "blockOwnerDeletion": False,
    }
    for obj in objects:
        if obj["kind"] != "Job":
            obj["metadata"]["ownerReferences"] = [reference]


def _for_create(obj: Obj) -> Obj:
    result = copy.deepcopy(obj)
    result["metadata"].pop("ownerReferences", None)
    return result


_SERVER_FIELDS = ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid")


def _comparable(obj: Obj) -> Obj:
    """An object without what the server changes on its own (status, versions, timestamps)."""
    result = {k: v for k, v in obj.items() if k != "status"}
    result["metadata"] = {
        k: v for k, v in (obj.get("metadata") or {}).items() if k not in _SERVER_FIELDS
    }
    return result


def _template(job: Obj) -> Any:
    return reading.spec(job).get("template")
