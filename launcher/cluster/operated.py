"""Jobs the operator runs: the MultiWorkerJob, not its child Jobs, is what the CLI acts on.

The operator's child Jobs carry the same labels as the ones `tflaunch submit` applies, but
their controller is a MultiWorkerJob that restarts the whole group when a worker fails and
recreates a Job that someone deleted. So for such a job the CLI must not apply over the
Jobs (that would take them over: backoffLimit, TTL), must not report a child's failure as the
job's (the operator is about to restart it), and must delete the MultiWorkerJob, not its
children. Which object controls a Job is read from its controller ownerReference.

A MultiWorkerJob that cannot be read (the CRD is not installed: 404; no RBAC to read it: 403)
counts as absent, so clusters without the operator behave exactly as before.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from launcher.api import identity
from launcher.cluster.client import Cluster, Obj
from launcher.cluster.find import job_objects
from launcher.cluster.kinds import Kind
from launcher.cluster.retry import retrying
from launcher.cluster.watch import wait_gone
from launcher.core import reading, tfjob
from launcher.core.errors import Conflict, ExitStatus, Forbidden, NotFound, WaitTimeout

MULTIWORKERJOB = Kind(identity.KIND, identity.API_VERSION, identity.PLURAL)
"""The operator's custom resource (one `Kind` for the CLI and the operator)."""
TFJOB = Kind("TFJob", "kubeflow.org/v1", "tfjobs")
"""Kubeflow's TFJob, which the operator serves with `--tfjobs` (`launcher.operator.tfjobs`)
through a MultiWorkerJob of the same name that the TFJob controls."""


class OperatorOwned(Conflict):
    """The job is the operator's (or the CLI's, for `submit --operator`): nothing was applied.
    Bad input, like a changed spec: the fix is another command, not a retry."""

    exit_status = ExitStatus.BAD_INPUT


def controller_of(obj: Mapping[str, Any]) -> str | None:
    """The name of the MultiWorkerJob that controls `obj`, or None."""
    for ref in reading.owner_references(obj):
        ours = ref.get("kind") == identity.KIND and ref.get("apiVersion") == identity.API_VERSION
        if ours and ref.get("controller"):
            return str(ref.get("name"))
    return None


def get_multiworkerjob(cluster: Cluster, name: str, namespace: str) -> Obj | None:
    """The MultiWorkerJob `name`; None when absent, or when it cannot be read (no CRD, no
    RBAC for it: then the cluster has no operator for this user)."""
    try:
        return cluster.get(MULTIWORKERJOB, name, namespace)
    except (NotFound, Forbidden):
        return None


def list_multiworkerjobs(
    cluster: Cluster, namespace: str | None, *, all_namespaces: bool = False
) -> list[Obj]:
    """Every MultiWorkerJob in a namespace (or all); [] when they cannot be listed."""
    try:
        return cluster.list_objects(MULTIWORKERJOB, namespace, all_namespaces=all_namespaces)
    except (NotFound, Forbidden):
        return []


def operator_job(
    cluster: Cluster, name: str, namespace: str, jobs: Iterable[Mapping[str, Any]]
) -> Obj | None:
    """The MultiWorkerJob that runs job `name`, given its Jobs as found by label: their
    controller; or, when there are no Jobs (not created yet, between a group's restarts, or
    finished and collected), the MultiWorkerJob of that name. None for a CLI job."""
    jobs = list(jobs)
    for job in jobs:
        owner = controller_of(job)
        if owner is not None:
            return get_multiworkerjob(cluster, owner, namespace)
    if jobs:
        return None  # Jobs without a MultiWorkerJob controller: `tflaunch submit`'s
    return get_multiworkerjob(cluster, name, namespace)


def refuse_if_operated(
    cluster: Cluster,
    job: str,
    namespace: str,
    found: Iterable[Mapping[str, Any] | None],
    program: str,
) -> None:
    """`tflaunch submit` must not apply over a job the operator runs: raise `OperatorOwned`
    naming its MultiWorkerJob. `found`: the job's objects already read (Jobs, Service...)."""
    objects = [o for o in found if o]
    owner = next((n for o in objects if (n := controller_of(o)) is not None), None)
    if owner is None and not any(o.get("kind") == "Job" for o in objects):
        resource = get_multiworkerjob(cluster, job, namespace)
        owner = None if resource is None else job
    if owner is not None:
        raise OperatorOwned(
            f"job {job} in namespace {namespace} is run by the operator (MultiWorkerJob "
            f"{owner}); nothing was applied; change it with {program} submit --operator, or "
            f"delete it first ({program} delete {job} -n {namespace})"
        )


def apply_multiworkerjob(
    cluster: Cluster,
    document: Obj,
    *,
    dry_run: bool = False,
    replace: bool = False,
    program: str = "tflaunch",
    timeout: float = 300,
) -> Literal["created", "configured", "unchanged", "replaced"]:
    """Server-side apply of a MultiWorkerJob (`tflaunch submit --operator`); what happened.

    Refused (`OperatorOwned`) when Jobs of the same name were applied without the operator:
    its group would fail with NameConflict. With `replace` an existing MultiWorkerJob is
    deleted first (foreground, waiting until it and its children are gone).
    """
    meta = document["metadata"]
    name, namespace = str(meta["name"]), str(meta.get("namespace") or cluster.namespace)
    found = job_objects(cluster, name, namespace)
    plain = [j["metadata"]["name"] for j in found.jobs if controller_of(j) is None]
    if plain:
        raise OperatorOwned(
            f"job {name} in namespace {namespace} was submitted without the operator (Job "
            f"{', '.join(sorted(plain))}); nothing was applied; delete it first "
            f"({program} delete {name} -n {namespace}), or submit without --operator"
        )
    current = cluster.get(MULTIWORKERJOB, name, namespace)
    if current is not None and replace:
        if dry_run:
            cluster.apply(document, kind=MULTIWORKERJOB, dry_run=True)
            return "replaced"
        delete_multiworkerjob(cluster, name, namespace, wait=True, timeout=timeout)
    result = cluster.apply(document, kind=MULTIWORKERJOB, dry_run=dry_run)
    if current is None:
        return "created"
    if replace:
        return "replaced"
    if result.get("spec") == current.get("spec"):
        return "unchanged"
    return "configured"


def delete_multiworkerjob(
    cluster: Cluster, name: str, namespace: str, *, wait: bool = True, timeout: float = 300
) -> list[str]:
    """Delete the MultiWorkerJob `name` (foreground: its Jobs and pods go first, and the
    operator, seeing it terminate, recreates nothing). Returns `kind/name` of what was there,
    the MultiWorkerJob first; with `wait`, returns once all of it is gone."""
    deadline = time.monotonic() + timeout
    found = job_objects(cluster, name, namespace)
    deleted = [f"{identity.KIND.lower()}/{name}"]
    resource = get_multiworkerjob(cluster, name, namespace)
    owner = tfjob.controller_of(resource) if resource is not None else None
    if owner is not None:  # else the operator would convert the TFJob again
        retrying(
            lambda: cluster.delete(TFJOB, owner, namespace, propagation="Foreground"),
            cluster.outage,
            deadline=deadline,
        )
        deleted.insert(0, f"tfjob.kubeflow.org/{owner}")
    deleted += [
        f"{o['kind'].lower()}/{o['metadata']['name']}"
        for o in [*found.jobs, *found.services, *found.network_policies, *found.pods]
    ]
    gone = not retrying(
        lambda: cluster.delete(MULTIWORKERJOB, name, namespace, propagation="Foreground"),
        cluster.outage,
        deadline=deadline,
    )
    if gone:
        return []
    if not wait:
        return deleted
    while True:  # one object: a GET a second (the children's own watch follows below)
        exists = retrying(
            lambda: cluster.get(MULTIWORKERJOB, name, namespace),
            cluster.outage,
            deadline=deadline,
        )
        if exists is None:
            break
        if time.monotonic() > deadline:
            raise WaitTimeout(
                f"MultiWorkerJob {name} in namespace {namespace} is still being deleted after "
                f"{timeout:.0f}s (kubectl describe mwj {name} -n {namespace})"
            )
        time.sleep(1.0)
    wait_gone(cluster, name, namespace, timeout=max(0.0, deadline - time.monotonic()))
    return deleted
