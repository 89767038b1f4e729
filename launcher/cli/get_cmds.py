"""`tflaunch status` and `tflaunch list`: kubectl get's flags for tflaunch jobs.

`-o json|yaml|wide|name` picks the rendering (`launcher.cli.output`), `-w/--watch` keeps
printing what changes until Ctrl-C or `--timeout`, and `list -l` narrows by labels. The
data comes from `launcher.cluster.find` (the objects) and `launcher.cluster.status` (what they
mean), the same reading as `wait` and `logs -f`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import click

from launcher.cli import durations, job_progress, operator_jobs, output
from launcher.cli.completion import job_name_argument
from launcher.cli.options import cluster_options, connect, namespace_option
from launcher.cli.wait_cmd import not_found
from launcher.cli.wait_cmd import now as utc_now
from launcher.cluster import status
from launcher.core.errors import ExitStatus, Invalid, SpecError

if TYPE_CHECKING:  # the kubernetes client takes half a second to import: only when used
    from launcher.cluster.client import Cluster

Obj = Mapping[str, Any]


def watch_options(func: output.F) -> output.F:
    """`-w/--watch` and the `--timeout` that ends a watch (exit 0, like Ctrl-C)."""
    func = click.option(
        "--timeout",
        "watch_timeout",
        metavar="DURATION",
        help=f"With --watch: stop after this long, {durations.EXAMPLE} (default: until Ctrl-C).",
    )(func)
    return click.option(
        "-w", "--watch", is_flag=True, help="After the first output, print each change."
    )(func)


def _watch_seconds(watch: bool, text: str | None) -> float | None:
    if text is None:
        return None
    if not watch:
        raise click.UsageError("--timeout only applies with -w/--watch")
    return durations.seconds(text, "--timeout")


class _Printer:
    """Prints watch output as kubectl get -w does: a table gets its header and first rows
    at once (columns as wide as those need), then a row whenever a row's content changes
    (the ticking AGE aside); a document or a name is printed whole again when it changes
    (YAML documents separated by `---`)."""

    def __init__(self, fmt: str | None, header: list[str] | None = None) -> None:
        self.fmt = fmt
        self.header = header or []
        self.widths = [len(title) for title in self.header]
        self.seen: dict[str, tuple[str, ...]] = {}
        self.printed = False

    def rows(self, rows: dict[str, list[str]]) -> None:
        """Print the rows that changed; the first time, the header with them."""
        changed = {key: cells for key, cells in rows.items() if self._changed(key, cells)}
        if not self.printed:
            for cells in changed.values():
                self.widths = [max(w, len(c)) for w, c in zip(self.widths, cells, strict=True)]
            click.echo(self._line(self.header))
            self.printed = True
        for cells in changed.values():
            click.echo(self._line(cells))

    def _changed(self, key: str, cells: list[str]) -> bool:
        age = self.header.index("AGE") if "AGE" in self.header else None
        comparable = tuple(c for i, c in enumerate(cells) if i != age)
        if self.seen.get(key) == comparable:
            return False
        self.seen[key] = comparable
        return True

    def _line(self, cells: list[str]) -> str:
        return "   ".join(c.ljust(w) for c, w in zip(cells, self.widths, strict=True)).rstrip()

    def note(self, key: str, line: str) -> None:
        """Print a line of a table's watch (not a row) unless it is what `key` printed last."""
        if self.seen.get(key) != (line,):
            self.seen[key] = (line,)
            click.echo(line)

    def text(self, key: str, text: str) -> None:
        """Print `text` unless it is what `key` printed last."""
        if self.seen.get(key) == (text,):
            return
        if self.printed and self.fmt == "yaml":
            click.echo("---")
        self.seen[key] = (text,)
        self.printed = True
        click.echo(text)


def _until(deadline: float | None) -> bool:
    return deadline is None or time.monotonic() < deadline


# --- status --------------------------------------------------------------------------------


@click.command("status")
@job_name_argument()
@output.output_option()
@watch_options
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
    seconds = _watch_seconds(watch, watch_timeout)
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
        summary = status.summarize(name, ns, found.jobs, found.pods)
        if resource is not None:  # -o json|yaml: under status.operator
            summary = operator_jobs.with_resource(summary, resource)
        current = utc_now()
        text = output.render([summary], fmt, current, single=True)
        if fmt in (None, "wide") and resource is None:  # where training stands (the chief's log)
            training = job_progress.latest(cluster, summary)
            if training is not None:
                heading, _, table = text.partition("\n")
                text = f"{heading}\ntraining: {training.words(current)}\n{table}"
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
    printer = _Printer(fmt, output.status_header(wide))
    first = True
    resource = _OperatorResource(cluster, name, ns)
    for objects in watch.watch_job(cluster, name, ns, tick=0.5):
        mwj = resource.read(objects.jobs) if fmt != "name" else None
        if first and not objects.jobs and not objects.pods and mwj is None:
            raise not_found(name, ns)
        summary = status.summarize(name, ns, objects.jobs, objects.pods)
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
        if not _until(deadline):
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


# --- list ----------------------------------------------------------------------------------


@click.command("list")
@click.option("-A", "--all-namespaces", is_flag=True, help="Jobs of every namespace.")
@click.option(
    "-l",
    "--selector",
    metavar="SELECTOR",
    help="Only jobs whose labels match, kubectl's syntax: -l team=ml,env!=dev, -l 'tier in (a,b)'.",
)
@output.output_option()
@watch_options
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
    seconds = _watch_seconds(watch, watch_timeout)
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
    printer = _Printer(fmt, output.list_header(wide, all_namespaces))
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
        if not _until(deadline):
            return


COMMANDS = (status_command, list_command)
