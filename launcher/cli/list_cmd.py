"""`tflaunch list`: every tflaunch job of a namespace (or all: -A), kubectl get's flags
(`-o`, `-w`, `-l` to narrow by labels). Reads Jobs only (no pods): `launcher.cluster.status.
overviews`, with the operator's state for the jobs a MultiWorkerJob runs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import click

from launcher.cli import operator_jobs, output, watching
from launcher.cli.options import cluster_options, connect, namespace_option
from launcher.cli.wait_cmd import now as utc_now
from launcher.cluster import status
from launcher.core.errors import ExitStatus, Invalid, SpecError

if TYPE_CHECKING:  # the kubernetes client takes half a second to import: only when used
    from launcher.cluster.client import Cluster

Obj = Mapping[str, Any]


@click.command("list")
@click.option("-A", "--all-namespaces", is_flag=True, help="Jobs of every namespace.")
@click.option(
    "-l",
    "--selector",
    metavar="SELECTOR",
    help="Only jobs whose labels match, kubectl's syntax: -l team=ml,env!=dev, -l 'tier in (a,b)'.",
)
@output.output_option()
@watching.watch_options
@namespace_option
@cluster_options
def list_command(
    all_namespaces: bool,
    selector: str | None,
    fmt: str | None,
    watch: bool,
    watch_timeout: str | None,
    namespace: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
) -> int:
    """List the jobs tflaunch manages in a namespace (or all), with state and age.

    \b
    Examples:
      tflaunch list -A
      tflaunch list -l team=ml -o json
      tflaunch list -w
    """
    if all_namespaces and namespace:
        raise click.UsageError("-A/--all-namespaces and -n/--namespace cannot be combined")
    seconds = watching.watch_seconds(watch, watch_timeout)
    cluster = connect(kubeconfig, kube_context)
    from launcher.cluster import find

    ns = namespace or cluster.namespace
    with _selector_checked(selector):
        if watch:
            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a watch ends
                _watch_list(cluster, ns, all_namespaces, selector, fmt, seconds)
            return ExitStatus.SUCCESS
        jobs = find.managed_jobs(cluster, ns, all_namespaces=all_namespaces, selector=selector)
    summaries = status.overviews(jobs)
    if fmt not in output.DOCUMENT_FORMATS and fmt != "name":
        summaries = _with_operator_state(cluster, ns, all_namespaces, selector, jobs, summaries)
    if not summaries and fmt not in output.DOCUMENT_FORMATS:
        where = "any namespace" if all_namespaces else f"namespace {ns}"
        matching = f" matching {selector}" if selector else ""
        click.echo(f"no tflaunch jobs{matching} in {where}", err=True)
        return ExitStatus.SUCCESS
    current = utc_now()
    click.echo(output.render(summaries, fmt, current, single=False, all_namespaces=all_namespaces))
    return ExitStatus.SUCCESS


def _with_operator_state(
    cluster: Cluster,
    ns: str,
    all_namespaces: bool,
    selector: str | None,
    jobs: list[Any],
    summaries: list[status.JobStatus],
) -> list[status.JobStatus]:
    """The table's STATE of a job the operator runs is its MultiWorkerJob's phase."""
    from launcher.cluster import operated
    from launcher.core import labels

    resources = operated.list_multiworkerjobs(cluster, ns, all_namespaces=all_namespaces)
    if not resources:
        return summaries
    controlled = {
        (str(j["metadata"].get("namespace")), str(j["metadata"]["labels"].get(labels.JOB_NAME)))
        for j in jobs
        if operated.controller_of(j) is not None
    }
    return operator_jobs.with_operator_state(
        summaries, resources, controlled, add_missing=not selector
    )


@contextlib.contextmanager
def _selector_checked(selector: str | None) -> Iterator[None]:
    """The API server parses label selectors (kubectl's syntax, exactly): its refusal of one
    becomes a usage error that names the flag."""
    try:
        yield
    except Invalid as error:
        if not selector:
            raise
        raise SpecError(
            "-l/--selector",
            f"{selector!r} is not a label selector ({error}); e.g. -l team=ml,env!=dev "
            "or -l 'team in (ml,web)'",
        ) from None


def _list_snapshots(
    cluster: Cluster, ns: str, all_namespaces: bool, selector: str | None
) -> Iterator[list[status.JobStatus] | None]:
    """The jobs anew after every change, None on a quiet tick (to check the deadline)."""
    from launcher.cluster import find, watch

    jobs: dict[tuple[str, str], Obj] = {}
    listed = False
    streams = [("Job", ns, find.managed_selector(selector))]
    for item in watch.watch_many(cluster, streams, tick=0.5, all_namespaces=all_namespaces):
        if item is None:
            yield None
            continue
        event = item[1]
        if event.type == "RELISTED":
            listed = True
            jobs = {_key(o): o for o in event.items}
        elif event.object is not None:
            if event.type == "DELETED":
                jobs.pop(_key(event.object), None)
            else:
                jobs[_key(event.object)] = event.object
        if listed:
            yield status.overviews(jobs.values())


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _watch_list(
    cluster: Cluster,
    ns: str,
    all_namespaces: bool,
    selector: str | None,
    fmt: str | None,
    seconds: float | None,
) -> None:
    deadline = None if seconds is None else time.monotonic() + seconds
    wide = fmt == "wide"
    table = fmt not in output.DOCUMENT_FORMATS and fmt != "name"
    printer = watching.Printer(fmt, output.list_header(wide, all_namespaces))
    shown: dict[str, list[str]] = {}
    for summaries in _list_snapshots(cluster, ns, all_namespaces, selector):
        if summaries is not None:
            current = utc_now()
            rows: dict[str, list[str]] = {}
            for summary in summaries:
                key = f"{summary.namespace}/{summary.name}"
                if not table:
                    printer.text(key, output.render([summary], fmt, current, single=True))
                    continue
                rows[key] = shown[key] = output.list_row(summary, current, wide, all_namespaces)
            for key in sorted(set(shown) - set(rows)):  # kubectl shows a deleted one's last row
                rows[key] = shown.pop(key)
                rows[key][printer.header.index("STATE")] = "Deleted"
            if table:
                printer.rows(rows)
                for key in set(printer.seen) - set(shown):
                    del printer.seen[key]  # gone: the same name may come back
        if not watching.until(deadline):
            return


COMMANDS = (list_command,)
