"""`-o json|yaml|wide|name`: how `status`, `list`, `doctor` and `wait` print what they found.

The data comes from one place (`launcher.cluster.find` reads the objects, the pure reader
`launcher.cluster.status` says what they mean); this module only turns that into text: the
tables a person reads, and the documents a script reads. The documents are a stable
interface, described by docs/output-schema.json (a test validates real output against it):
fields may be added, never renamed or removed, without a new `apiVersion`. Pure: `now` is
passed in.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

from launcher.api.status import Status
from launcher.cluster import doctor, status
from launcher.core import admission, documents, yamldoc

F = TypeVar("F", bound=Callable[..., Any])

API_VERSION = "output.tflaunch.dev/v1"
"""The version of the documents below (not a served API: only what tflaunch prints)."""
FORMATS = ("json", "yaml", "wide", "name")
DOCUMENT_FORMATS = ("json", "yaml")

Document = dict[str, Any]


def output_option(formats: Sequence[str] = FORMATS) -> Callable[[F], F]:
    """kubectl's `-o/--output`; without it, the human table."""
    return click.option(
        "-o",
        "--output",
        "fmt",
        type=click.Choice(list(formats)),
        help=f"Output format: {', '.join(formats)} (default: a table). JSON/YAML as in "
        "docs/output-schema.json.",
    )


# --- Documents -----------------------------------------------------------------------------


def timestamp(moment: datetime.datetime | None) -> str | None:
    """RFC 3339 in UTC with a `Z`, as the API server writes it."""
    if moment is None:
        return None
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_document(summary: status.JobStatus) -> Document:
    """A `JobStatus` document. With workers read (`status`, `wait`): every worker's row, the
    restarts, the preemptions and the operator's status (null for a job it does not run);
    from the Jobs alone (`list`, `summary.active` set): none of these."""
    pods_read = summary.active is None
    body: Document = {
        "state": summary.state,
        "condition": summary.condition,
        "running": summary.running if pods_read else summary.active,
    }
    if pods_read:
        body["restarts"] = summary.restarts
        body["preemptions"] = summary.preemptions.count
        body["resumedAtStep"] = summary.preemptions.resumed_at_step
        body["lastPreemptionTime"] = timestamp(summary.preemptions.last)
        body["kueueEvictions"] = dict(summary.evictions)
        body["restartsInPlace"] = summary.restarts_in_place
        body["lastRestartInPlace"] = summary.last_restart_in_place
    body["jobs"] = list(summary.jobs)
    if pods_read:
        body["workers"] = [_worker_document(w) for w in summary.workers]
        body["operator"] = operator_document(summary) if summary.operator is not None else None
    return {
        "apiVersion": API_VERSION,
        "kind": "JobStatus",
        "metadata": {
            "name": summary.name,
            "namespace": summary.namespace,
            "creationTimestamp": timestamp(summary.created),
            "labels": dict(summary.labels),
        },
        "spec": {"layout": summary.layout, "workers": summary.expected},
        "status": body,
    }


def operator_document(summary: status.JobStatus) -> Document:
    """The MultiWorkerJob's Status (`summary.operator`) as `status -o json|yaml` shows it
    (`status.operator`): keys as in docs/output-schema.json's OperatorStatus."""
    current = summary.operator or Status()
    progress = current.progress
    return {
        "multiWorkerJob": summary.name,
        "phase": current.phase,
        "reason": current.reason or None,
        "message": current.message or None,
        "workers": current.workers or None,
        "restarts": current.restarts,
        "backoffLimit": summary.backoff_limit,
        "preemptions": current.preemptions,
        "resumedAtStep": current.resumed_at_step,
        "lastPreemptionTime": current.last_preemption_time,
        "progress": None if progress is None else documents.document_of(progress),
        "result": dict(current.result),
    }


def _worker_document(worker: status.Worker) -> Document:
    return {
        "index": worker.index,
        "pod": worker.pod,
        "phase": worker.phase,
        "node": worker.node,
        "restarts": worker.restarts,
        "creationTimestamp": timestamp(worker.created),
        "reason": worker.reason,
        "exitCode": worker.exit_code,
        "finishedAt": timestamp(worker.finished),
    }


def job_list_document(summaries: Sequence[status.JobStatus]) -> Document:
    """A `JobList`: kubectl's `List` shape, items in namespace and name order."""
    return {
        "apiVersion": API_VERSION,
        "kind": "JobList",
        "items": [job_document(s) for s in summaries],
    }


def doctor_document(checks: Sequence[doctor.Check], namespace: str, name: str | None) -> Document:
    """A `DoctorReport`: every check with its outcome, and how many failed."""
    return {
        "apiVersion": API_VERSION,
        "kind": "DoctorReport",
        "metadata": {"name": name, "namespace": namespace},
        "checks": [
            {"name": c.name, "outcome": c.outcome, "detail": c.detail, "fix": c.fix} for c in checks
        ],
        "failed": sum(c.failed for c in checks),
    }


def dump(document: Mapping[str, Any], fmt: str) -> str:
    """A document as JSON (indented, kubectl's layout) or YAML, keys in schema order."""
    if fmt == "json":
        return json.dumps(document, indent=2, ensure_ascii=False)
    if fmt == "yaml":
        text = yamldoc.dump(dict(document), allow_unicode=True, width=2**20)
        return text.rstrip("\n")  # long lines unwrapped, as kubectl prints them
    raise ValueError(f"not a document format: {fmt}")


# --- Tables --------------------------------------------------------------------------------


def table(rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, three spaces apart (kubectl's look)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines)


def status_heading(summary: status.JobStatus, now: datetime.datetime) -> str:
    return (
        f"job {summary.name} in namespace {summary.namespace}: {summary.state}, "
        f"{summary.running}/{summary.expected} workers running, {summary.layout} layout, "
        f"age {status.age(summary.created, now)}"
    )


STATUS_COLUMNS = ["WORKER", "POD", "PHASE", "NODE", "RESTARTS", "AGE", "REASON"]
STATUS_WIDE_COLUMNS = ["EXIT CODE", "FINISHED"]


def status_row(worker: status.Worker, now: datetime.datetime, wide: bool) -> list[str]:
    row = [
        str(worker.index),
        worker.pod or "-",
        worker.phase,
        worker.node or "-",
        str(worker.restarts),
        status.age(worker.created, now),
        worker.reason or "",
    ]
    if wide:  # before REASON, the one column of free text
        exit_code = "-" if worker.exit_code is None else str(worker.exit_code)
        finished = f"{status.age(worker.finished, now)} ago" if worker.finished else "-"
        row[-1:-1] = [exit_code, finished]
    return row


def status_header(wide: bool) -> list[str]:
    if not wide:
        return list(STATUS_COLUMNS)
    return [*STATUS_COLUMNS[:-1], *STATUS_WIDE_COLUMNS, STATUS_COLUMNS[-1]]


def status_text(summary: status.JobStatus, now: datetime.datetime, wide: bool = False) -> str:
    """`tflaunch status`: a heading, one row per worker, then the Jobs' condition."""
    rows = [status_header(wide), *(status_row(w, now, wide) for w in summary.workers)]
    lines = [status_heading(summary, now), table(rows)]
    if summary.preemptions.count and summary.operator is None:  # the operator's lines say it
        lines.insert(1, summary.preemptions.words())
    if summary.evictions:
        lines.insert(1, admission.describe_evictions(summary.evictions))
    if summary.condition:
        lines.append(f"condition: {summary.condition}")
    if summary.divergence and summary.operator is None:  # the operator's message says it
        lines.append(f"diverged: {summary.divergence.describe()}")
    if wide and summary.jobs:
        lines.append(f"jobs: {', '.join(summary.jobs)}")
    return "\n".join(lines)


def list_header(wide: bool, all_namespaces: bool) -> list[str]:
    header = ["NAME", "LAYOUT", "WORKERS", "STATE", "AGE"]
    if wide:
        header += ["RUNNING", "CONDITION"]
    return ["NAMESPACE", *header] if all_namespaces else header


def list_row(
    summary: status.JobStatus, now: datetime.datetime, wide: bool, all_namespaces: bool
) -> list[str]:
    row = [
        summary.name,
        summary.layout,
        str(summary.expected),
        summary.state,
        status.age(summary.created, now),
    ]
    if wide:
        row += [str(summary.active or 0), summary.condition or ""]
    return [summary.namespace, *row] if all_namespaces else row


def list_text(
    summaries: Sequence[status.JobStatus],
    now: datetime.datetime,
    wide: bool = False,
    all_namespaces: bool = False,
) -> str:
    """`tflaunch list`: one row per job."""
    rows = [list_header(wide, all_namespaces)]
    rows += [list_row(s, now, wide, all_namespaces) for s in summaries]
    return table(rows)


def names_text(summaries: Sequence[status.JobStatus]) -> str:
    """`-o name`: one job name a line, what every tflaunch command takes as NAME."""
    return "\n".join(s.name for s in summaries)


def render(
    summaries: Sequence[status.JobStatus],
    fmt: str | None,
    now: datetime.datetime,
    *,
    single: bool,
    all_namespaces: bool = False,
) -> str:
    """`status` (`single`: one job, its workers) or `list` output in format `fmt`."""
    if fmt == "name":
        return names_text(summaries)
    if fmt in DOCUMENT_FORMATS:
        document = job_document(summaries[0]) if single else job_list_document(summaries)
        return dump(document, fmt)
    wide = fmt == "wide"
    if single:
        return status_text(summaries[0], now, wide)
    return list_text(summaries, now, wide, all_namespaces)


_API_GROUP = {"job": "job.batch", "networkpolicy": "networkpolicy.networking.k8s.io"}
"""kubectl's spelling of an object kind in `kind/name` (lower case, with its API group)."""


def kubectl_kind(kind: str) -> str:
    """`job.batch`, `service`...: an object kind as kubectl prints it in `kind/name`."""
    return _API_GROUP.get(kind.lower(), kind.lower())
