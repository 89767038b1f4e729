"""`tflaunch status NAME`: one job's workers and verdict, kubectl get's flags (`-o json|yaml|
wide|name`, `-w/--watch` until Ctrl-C or `--timeout`). The data comes from
`launcher.cluster.find` (the objects) and `launcher.cluster.status` (what they mean), the same
reading as `wait` and `logs -f`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from launcher.cli import job_progress, operator_jobs, output, queued, watching
from launcher.cli.completion import job_name_argument
from launcher.cli.options import cluster_options, connect, namespace_option
from launcher.cli.wait_cmd import not_found
from launcher.cli.wait_cmd import now as utc_now
from launcher.cluster import stalls, status
from launcher.core.errors import ExitStatus

if TYPE_CHECKING:  # the kubernetes client takes half a second to import: only when used
    from launcher.cluster.client import Cluster

Obj = Mapping[str, Any]


@click.command("status")
@job_name_argument()
@output.output_option()
@watching.watch_options
@namespace_option
@cluster_options
def status_command(
    name: str,
    fmt: str | None,
    watch: bool,
    watch_timeout: str | None,
    namespace: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
) -> int:
    """Show each worker of job NAME (pod, phase, node, restarts, why not running) and the
    job's condition.

    \b
    Examples:
      tflaunch status mnist -n ml
      tflaunch status mnist -o json | jq .status.state
      tflaunch status mnist -w --timeout 10m
    """
    seconds = watching.watch_seconds(watch, watch_timeout)
    cluster = connect(kubeconfig, kube_context)
    from launcher.cluster import find

    ns = namespace or cluster.namespace
    if not watch:
        found = find.job_objects(cluster, name, ns)
        resource = None
        if fmt != "name":
            from launcher.cluster import operated

            resource = operated.operator_job(cluster, name, ns, found.jobs)
        if resource is not None and fmt not in output.DOCUMENT_FORMATS:
            for line in operator_jobs.summary_lines(resource, utc_now()):
                click.echo(line)  # the operator's verdict first, then its workers
            if not found.jobs and not found.pods:
                return ExitStatus.SUCCESS
        if not found.jobs and not found.pods and resource is None:
            raise not_found(name, ns)
        queued = find.workloads(cluster, found.jobs, held_only=False) if fmt != "name" else None
        summary = status.summarize(name, ns, found.jobs, found.pods, queued)
        if fmt != "name" and (waiting := stalls.creating(summary)):  # a volume that won't mount
            summary = stalls.with_pod_warnings(summary, find.warnings_of(cluster, waiting, ns))
        if resource is not None:  # -o json|yaml: under status.operator
            summary = operator_jobs.with_resource(summary, resource)
        chief = None
        if resource is None and fmt != "name":  # where training stands (the chief's log)
            chief = job_progress.read_chief(cluster, summary)
            summary = job_progress.with_restarts_in_place(summary, chief)
        current = utc_now()
        text = output.render([summary], fmt, current, single=True)
        if fmt in (None, "wide") and chief is not None:
            lines = [f"training: {chief.training.words(current)}"] if chief.training else []
            lines += [restarts] if (restarts := chief.restarts_words()) else []
            if lines:
                heading, _, table = text.partition("\n")
                text = "\n".join([heading, *lines, table])
        click.echo(text)
        return ExitStatus.SUCCESS
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a watch ends
        _watch_status(cluster, name, ns, fmt, seconds)
    return ExitStatus.SUCCESS


def _watch_status(
    cluster: Cluster, name: str, ns: str, fmt: str | None, seconds: float | None
) -> None:
    from launcher.cluster import watch

    deadline = None if seconds is None else time.monotonic() + seconds
    wide = fmt == "wide"
    printer = watching.Printer(fmt, output.status_header(wide))
    first = True
    resource = _OperatorResource(cluster, name, ns)
    workloads = queued.Workloads(cluster)
    for objects in watch.watch_job(cluster, name, ns, tick=0.5):
        mwj = resource.read(objects.jobs) if fmt != "name" else None
        if first and not objects.jobs and not objects.pods and mwj is None:
            raise not_found(name, ns)
        held = workloads.read(objects.jobs) if fmt != "name" else None
        summary = status.summarize(name, ns, objects.jobs, objects.pods, held)
        if mwj is not None:
            summary = operator_jobs.with_resource(summary, mwj)
        current = utc_now()
        if fmt in output.DOCUMENT_FORMATS or fmt == "name":
            printer.text(name, output.render([summary], fmt, current, single=True))
        else:
            for key, line in (operator_jobs.watch_lines(mwj) if mwj else {}).items():
                printer.note(f"operator/{key}", line)  # a new phase, restart...: a new line
            if first:
                click.echo(output.status_heading(summary, current))
            printer.rows(
                {str(w.index): output.status_row(w, current, wide) for w in summary.workers}
            )
            condition = f" ({summary.condition})" if summary.condition else ""
            verdict = f"job {name}: {summary.state}{condition}"
            if first:  # the heading said the state; remember it without printing it again
                printer.seen["job"] = (verdict,)
            printer.text("job", verdict)
            if summary.preemptions.count and mwj is None:  # the operator's line says it
                printer.note("preemptions", f"job {name}: {summary.preemptions.words()}")
        first = False
        if not watching.until(deadline):
            return


class _OperatorResource:
    """The MultiWorkerJob that runs the watched job, read again at most every
    `operator_jobs.POLL_SECONDS` (one small GET); never read again for a CLI job."""

    def __init__(self, cluster: Cluster, name: str, namespace: str) -> None:
        self.cluster, self.name, self.namespace = cluster, name, namespace
        self.known: bool | None = None  # None: not asked yet; False: a CLI job
        self.resource: Obj | None = None
        self.read_at = 0.0

    def read(self, jobs: Any) -> Obj | None:
        from launcher.cluster import operated
        from launcher.cluster.retry import retrying

        if self.known is None:
            self.resource = operated.operator_job(self.cluster, self.name, self.namespace, jobs)
            self.known, self.read_at = self.resource is not None or not jobs, time.monotonic()
            return self.resource
        if not self.known or time.monotonic() - self.read_at < operator_jobs.POLL_SECONDS:
            return self.resource
        owner = (self.resource or {}).get("metadata", {}).get("name", self.name)
        self.resource = retrying(
            lambda: operated.get_multiworkerjob(self.cluster, owner, self.namespace),
            self.cluster.outage,
        )
        self.read_at = time.monotonic()
        return self.resource


COMMANDS = (status_command,)
