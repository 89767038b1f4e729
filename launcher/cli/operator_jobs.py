"""The cluster commands for a job the operator runs: its MultiWorkerJob's status is the truth.

`submit --operator` applies the spec file as it is (it already is a MultiWorkerJob); `wait`,
`status` and `list` read the resource's status (phase, restarts, result) that the operator
writes, rather than the child Jobs, whose failures the operator answers with a group restart;
`delete` deletes the resource (`launcher.cluster.operated`).
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from launcher.api import status as api_status
from launcher.api.identity import API_VERSION, KIND
from launcher.api.spec import MultiWorkerJob
from launcher.cli import job_progress
from launcher.cli import queued as queued_lib
from launcher.cluster import status
from launcher.core import admission, documents, timestamps
from launcher.core.errors import ExitStatus, JobFailed, WaitTimeout

if TYPE_CHECKING:
    from launcher.cluster.client import Cluster

POLL_SECONDS = 1.0
"""How often `wait` reads the MultiWorkerJob (one small GET)."""
STALLED = frozenset({api_status.PODS_NOT_CREATED, api_status.ORPHANED_PODS})
"""Reasons of a group that waits for something only a person can fix: `wait` warns."""


def document_of(job: MultiWorkerJob) -> dict[str, Any]:
    """The MultiWorkerJob to apply for `job`: the spec file's content with the flags applied."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": job.name, "namespace": job.namespace},
        "spec": documents.document_of(job.spec),
    }


def status_of(resource: Mapping[str, Any]) -> api_status.Status:
    return documents.status_from_document(resource.get("status"))


def state_text(resource: Mapping[str, Any]) -> str:
    """The STATE of `tflaunch list`: the resource's phase, marked as the operator's."""
    current = status_of(resource)
    restarts = f", {current.restarts} restart{'s' if current.restarts != 1 else ''}"
    return f"{current.phase or 'Pending'} (operator{restarts if current.restarts else ''})"


def with_resource(summary: status.JobStatus, resource: Mapping[str, Any]) -> status.JobStatus:
    """`summary` of a job the operator runs, with its MultiWorkerJob's `.status` read into
    the Status type (`summary.operator`) and its backoffLimit; without Jobs (between
    restarts, or collected) its worker count is the resource's."""
    spec = resource.get("spec") or {}
    workers, limit = spec.get("workers"), spec.get("backoffLimit")
    return dataclasses.replace(
        summary,
        operator=status_of(resource),
        backoff_limit=limit if isinstance(limit, int) else None,
        expected=summary.expected or (workers if isinstance(workers, int) else 0),
    )


def watch_lines(resource: Mapping[str, Any]) -> dict[str, str]:
    """What `status -w` prints about the MultiWorkerJob, by key: `operator` (phase, ready
    workers, restarts, preemptions) and `training` (the operator's copy of the progress). A
    line is printed again when it changes, as kubectl's watch prints a changed row."""
    current = status_of(resource)
    name = (resource.get("metadata") or {}).get("name")
    limit = (resource.get("spec") or {}).get("backoffLimit")
    phase = current.phase or "Pending (no status yet)"
    line = (
        f"multiworkerjob {name}: {phase}"
        + (f" ({current.reason})" if current.reason and current.phase else "")
        + f", {current.workers or '0/?'} workers ready, restarts {current.restarts}"
        + (f" of {limit}" if limit is not None else "")
    )
    if current.preemptions:
        line += f", {api_status.describe_preemptions(current)}"
    lines = {"operator": line}
    training = job_progress.from_resource(resource)
    if training is not None:
        lines["training"] = f"multiworkerjob {name}: training {training.short()}"
    return lines


def summary_lines(resource: Mapping[str, Any], now: datetime.datetime) -> list[str]:
    """What `tflaunch status` says about the MultiWorkerJob before its workers' table."""
    meta = resource.get("metadata") or {}
    current = status_of(resource)
    limit = (resource.get("spec") or {}).get("backoffLimit")
    created = timestamps.created_at(resource)
    lines = [
        f"job {meta.get('name')} in namespace {meta.get('namespace')}: run by the operator "
        f"(MultiWorkerJob {meta.get('name')}): {current.phase or 'Pending (no status yet)'}, "
        f"{current.workers or '0/?'} workers ready, restarts {current.restarts}"
        + (f" of {limit}" if limit is not None else "")
        + f", age {status.age(created, now)}"
    ]
    if current.message:
        lines.append(f"{current.reason or 'message'}: {current.message}")
    if current.last_restart_in_place:
        lines.append(f"last {current.last_restart_in_place}")
    training = job_progress.from_resource(resource)
    if training is not None:
        lines.append(f"training: {training.words(now)}")
    if current.result:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(current.result.items()))
        lines.append(f"result: {shown}")
    return lines


def wait_for_multiworkerjob(
    cluster: Cluster,
    resource: Mapping[str, Any],
    timeout: float | None,
    pending_warning: float,
    say: Any,
    show: Any,
) -> int:
    """Follow a MultiWorkerJob's status until Succeeded (0), Failed (3) or --timeout (4).

    A worker that fails does not end the wait: the operator restarts the group (status
    Restarting, `restarts` one more), and only its verdict, phase Failed, is the job's.

    Args:
        say: prints a line on stderr (above the progress line).
        show: redraws the progress line (text, key that changes only when it matters).
    """
    from launcher.cluster import operated
    from launcher.cluster.retry import retrying

    meta = resource.get("metadata") or {}
    name, namespace = str(meta["name"]), str(meta["namespace"])
    start = time.monotonic()
    announced = status_of(resource).restarts
    preempted = status_of(resource).preemptions
    warned = False
    stalled = ""  # the reason last warned about: PodsNotCreated or OrphanedPods
    workloads = queued_lib.Workloads(cluster)
    said_queued: str | None = None
    queued_at = -queued_lib.READ_SECONDS
    while True:
        elapsed = time.monotonic() - start
        current_obj = retrying(
            lambda: cluster.get(operated.MULTIWORKERJOB, name, namespace),
            cluster.outage,
        )
        if current_obj is None:
            raise JobFailed(f"MultiWorkerJob {name} was deleted while waiting for it")
        current = status_of(current_obj)
        if current.restarts > announced:
            announced = current.restarts
            if current.last_restart_in_place.startswith(f"restart in place {announced}:"):
                say(f"{name}: {current.last_restart_in_place}; every worker restarts its "
                    "program in its pod, resuming from the last checkpoint")  # fmt: skip
            else:
                say(f"{name}: the operator restarts the group (restart {current.restarts}): "
                    f"{current.message}")  # fmt: skip
        if current.preemptions > preempted:
            preempted = current.preemptions
            say(f"{name}: {api_status.describe_preemptions(current)}")
        if current.reason != "Queued":
            said_queued = None
        elif elapsed - queued_at >= queued_lib.READ_SECONDS:  # held back by Kueue: its words
            queued_at = elapsed
            queued = _kueue_waiting(cluster, name, namespace, workloads)
            if queued and queued != said_queued:
                say(f"{name}: {queued}")
            said_queued = queued
        if current.reason in STALLED and current.reason != stalled:
            say(f"warning: {name}: {current.message}")  # once each time it stalls
        stalled = current.reason if current.reason in STALLED else ""
        if current.phase == "Succeeded":
            say(f"job {name} succeeded in {status.duration(elapsed)} (MultiWorkerJob, "
                f"{current.restarts} group restarts): {current.message}")  # fmt: skip
            return ExitStatus.SUCCESS
        if current.phase == "Failed":
            raise JobFailed(f"job {name} failed ({current.reason}): {current.message}")
        if current.phase is None and not warned and elapsed > pending_warning:
            warned = True
            say(
                f"warning: no operator has written MultiWorkerJob {name}'s status in "
                f"{status.duration(elapsed)}: is `tflaunch operator` running for namespace "
                f"{namespace}?"
            )
        phase = current.phase or "waiting for the operator"
        key = f"{name}: {phase}, {current.workers or '0/?'} workers ready, restarts " + str(
            current.restarts
        )
        if current.preemptions:
            key += f", preempted {current.preemptions}x"
        training = job_progress.from_resource(current_obj)
        if training is not None and current.phase == "Running":
            key += f", {training.short()}"
        show(f"{key}, {status.duration(elapsed)}", key)
        if timeout is not None and elapsed > timeout:
            raise WaitTimeout(
                f"job {name} did not finish within {status.duration(timeout)} ({key}); the "
                f"operator keeps running it: kubectl describe mwj {name} -n {namespace}"
            )
        time.sleep(POLL_SECONDS)


def _kueue_waiting(
    cluster: Cluster, name: str, namespace: str, workloads: queued_lib.Workloads
) -> str | None:
    """Why Kueue has not admitted the operator's Jobs of job `name` yet (its Workloads'
    words, `launcher.core.admission`), while the operator reports them queued."""
    from launcher.cluster import find
    from launcher.cluster.retry import retrying

    jobs = retrying(lambda: find.jobs_of(cluster, name, namespace), cluster.outage)
    return admission.waiting(jobs, workloads.read(jobs))


def with_operator_state(
    summaries: Sequence[status.JobStatus],
    resources: Sequence[Mapping[str, Any]],
    operated: set[tuple[str, str]],
    *,
    add_missing: bool = True,
) -> list[status.JobStatus]:
    """`tflaunch list`'s table: a job the operator runs shows its MultiWorkerJob's phase and
    restarts as STATE; a MultiWorkerJob without Jobs (between restarts, or finished and
    collected) gets a row too. `operated`: (namespace, job) of the jobs whose Jobs a
    MultiWorkerJob controls; `add_missing`: False under a label selector, which a
    MultiWorkerJob without Jobs cannot be matched against."""
    by_key = {(str(r["metadata"]["namespace"]), str(r["metadata"]["name"])): r for r in resources}
    rows: dict[tuple[str, str], status.JobStatus] = {}
    for summary in summaries:
        resource = by_key.get((summary.namespace, summary.name))
        if resource is not None and (summary.namespace, summary.name) in operated:
            summary = dataclasses.replace(
                summary, state=cast(Any, state_text(resource)), operator=status_of(resource)
            )
        rows[(summary.namespace, summary.name)] = summary
    for key, resource in by_key.items():
        if key in rows or not add_missing:
            continue
        spec = resource.get("spec") or {}
        rows[key] = status.JobStatus(
            name=key[1],
            namespace=key[0],
            state=cast(Any, state_text(resource)),
            workers=(),
            expected=int(spec.get("workers") or 0),
            layout=str(spec.get("layout") or "indexed"),
            condition=status_of(resource).message or None,
            created=timestamps.created_at(resource),
            operator=status_of(resource),
        )
    return [rows[key] for key in sorted(rows)]


def finished_check(cluster: Cluster, name: str, namespace: str) -> Callable[[Any], bool]:
    """For `logs -f`: True once the MultiWorkerJob is Succeeded, Failed or gone (its child
    Jobs fail and vanish at every group restart). Read at most once per POLL_SECONDS."""
    from launcher.cluster import operated

    last: list[Any] = [0.0, False]

    def finished(_objects: Any) -> bool:
        if time.monotonic() - last[0] >= POLL_SECONDS:
            current = cluster.get(operated.MULTIWORKERJOB, name, namespace)
            last[:] = [time.monotonic(), current is None or status_of(current).phase in DONE]
        return bool(last[1])

    return finished


DONE = ("Succeeded", "Failed")
