"""`tflaunch logs NAME`: every worker's log, prefixed `[worker N]` (`-f` follows new pods
after restarts too)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from launcher.cli import durations, operator_jobs
from launcher.cli.completion import job_name_argument
from launcher.cli.options import (
    cluster_options,
    connect,
    namespace_option,
)
from launcher.cli.wait_cmd import not_found
from launcher.cluster import status
from launcher.core import contract
from launcher.core.errors import NotFound

if TYPE_CHECKING:  # the kubernetes client takes half a second to import: only when used
    from launcher.cluster.find import JobObjects


@click.command("logs")
@job_name_argument()
@click.option("-f", "--follow", is_flag=True, help="Keep streaming, new pods after restarts too.")
@click.option("--worker", type=click.IntRange(min=0), help="Only this worker index.")
@click.option("--since", metavar="DURATION", help="Only lines newer than this, e.g. 10m.")
@namespace_option
@cluster_options
def logs_command(
    name: str,
    follow: bool,
    worker: int | None,
    since: str | None,
    namespace: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Print the logs of job NAME's workers, each line prefixed with `[worker i]`.

    \b
    Examples:
      tflaunch logs mnist -f
      tflaunch logs mnist --worker 1 --since 10m
    """
    since_seconds = math.ceil(durations.seconds(since, "--since")) if since is not None else None
    cluster = connect(kubeconfig, kube_context)
    from launcher.cluster import logs

    ns = namespace or cluster.namespace
    pods_seen: dict[int | None, int] = {}

    def job_finished(objects: JobObjects) -> bool:
        return status.summarize(name, ns, objects.jobs, objects.pods).finished

    finished: Callable[[JobObjects], bool] = job_finished
    resource = None
    if follow:  # a job the operator runs ends with its MultiWorkerJob, not with a child Job
        from launcher.cluster import operated
        from launcher.core import labels

        jobs = cluster.list_objects("Job", ns, labels.job_selector_string(name))
        resource = operated.operator_job(cluster, name, ns, jobs)
        if resource is not None:
            finished = operator_jobs.finished_check(cluster, name, ns)
    try:
        for line in logs.job_logs(
            cluster,
            name,
            ns,
            worker=worker,
            follow=follow,
            since_seconds=since_seconds,
            finished=finished,
            jobs_recreated=resource is not None,
        ):
            prefix = f"[worker {line.index if line.index is not None else '?'}]"
            if line.note is not None:
                click.echo(f"{prefix} --- {line.note} ---", err=True)
                continue
            if line.text is None:  # a newly followed pod
                seen = pods_seen[line.index] = pods_seen.get(line.index, -1) + 1
                if seen:
                    click.echo(
                        f"{prefix} --- restart {seen}: following pod {line.pod} ---", err=True
                    )
                continue
            # Keras' bar is one line of frames (`\r`, `\b`): its last one, after the prefix.
            click.echo(f"{prefix} {contract.final_frame(line.text)}")
    except NotFound as error:
        if str(error).startswith("job "):
            raise not_found(name, ns) from error
        raise


COMMANDS = (logs_command,)
