"""The children the operator creates: `render.render(job, ...)`, owned by the MultiWorkerJob,
for a group that the operator (not Kubernetes) restarts.

Why other arguments: the operator restarts the whole worker group, so each Job gets
backoffLimit 0 and the restart count; the operator's TTL deletes the resource and with it
everything, so the Jobs get none; the deadline left is carried over a restart. `spec_hash`
records what the Jobs were rendered from, so that a spec edit is noticed.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from launcher.api import identity
from launcher.api import spec as spec_model
from launcher.core import labels, render, runs
from launcher.core.timestamps import parse_time
from launcher.operator import crd
from launcher.operator.crd import Status
from launcher.operator.objects import K8sObject, meta_of, name_of


def trimmed(resource: Mapping[str, Any]) -> dict[str, Any]:
    """The resource as a spec file: apiVersion, kind, metadata.name/namespace, spec."""
    meta = meta_of(resource)
    return {
        "apiVersion": resource.get("apiVersion"),
        "kind": resource.get("kind"),
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace", "default")},
        "spec": copy.deepcopy(resource.get("spec")),
    }


def spec_hash(job: spec_model.MultiWorkerJob) -> str:
    """Identifies what the child Jobs were rendered from, minus what applies without them.

    suspend, backoffLimit and ttlSecondsAfterFinished are the operator's own settings: they
    take effect at once, without recreating the Jobs.
    """
    relevant = dataclasses.replace(
        job.spec, suspend=False, backoff_limit=0, ttl_seconds_after_finished=None
    )
    document = {"metadata": crd.document_of(job.metadata), "spec": crd.document_of(relevant)}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def owner_reference(resource: Mapping[str, Any]) -> dict[str, Any]:
    """Makes the MultiWorkerJob own a child: `kubectl delete mwj` deletes it too."""
    return {
        "apiVersion": identity.API_VERSION,
        "kind": identity.KIND,
        "name": name_of(resource),
        "uid": str(meta_of(resource).get("uid", "")),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def children(
    job: spec_model.MultiWorkerJob,
    resource: Mapping[str, Any],
    restarts: int,
    deadline_seconds: int | None,
) -> list[K8sObject]:
    """`render.render(job)` for a group restarted by the operator.

    Each object is owned by the MultiWorkerJob. Each Job gets backoffLimit 0 (the operator
    restarts the whole group; the podFailurePolicy stays, so a config error still fails the
    Job at once), no TTL (the operator's TTL deletes the resource and with it everything),
    the remaining deadline, and the restart count in $TFLAUNCH_RESTARTS.
    """
    # The resource's uid is the run: every group restart resumes it, a new MultiWorkerJob
    # of the same name does not (unless spec.checkpoint.run names an earlier run).
    run = runs.with_run(job, str(meta_of(resource).get("uid") or ""))
    group = dataclasses.replace(
        run,
        spec=dataclasses.replace(
            run.spec, ttl_seconds_after_finished=None, active_deadline_seconds=deadline_seconds
        ),
    )
    return render.render(
        group,
        backoff_limit=0,
        restarts=restarts,
        owner=owner_reference(resource),
        job_annotations={
            labels.SPEC_HASH: spec_hash(job),
            labels.SUSPEND_REQUESTED: bool_text(job.spec.suspend),
            labels.GROUP_RESTARTS: str(restarts),
        },
    )


def bool_text(value: bool) -> str:
    return "true" if value else "false"


def remaining_deadline(
    job: spec_model.MultiWorkerJob, status: Status, now: datetime.datetime
) -> int | None:
    """Seconds left of spec.activeDeadlineSeconds, counted from status.startTime."""
    limit = job.spec.active_deadline_seconds
    if limit is None:
        return None
    started = parse_time(status.start_time)
    used = 0 if started is None else int((now - started).total_seconds())
    return limit - used
