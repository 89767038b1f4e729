"""`tflaunch delete NAME`: delete every object of a job (its MultiWorkerJob when the operator
runs it), and by default wait until they are gone."""

from __future__ import annotations

import click

from launcher.api import identity
from launcher.cli import output
from launcher.cli.completion import job_name_argument
from launcher.cli.durations import DURATION, EXAMPLE
from launcher.cli.options import (
    cluster_options,
    connect,
    namespace_option,
)

_kind = output.kubectl_kind
"""kubectl's spelling of an object kind in `kind/name`."""


@click.command("delete")
@job_name_argument()
@click.option("--wait/--no-wait", default=True, show_default=True, help="Until everything is gone.")
@click.option(
    "--timeout",
    type=DURATION,
    default=300,
    show_default=True,
    metavar="DURATION",
    help=f"How long --wait waits, {EXAMPLE}.",
)
@namespace_option
@cluster_options
def delete_command(
    name: str,
    wait: bool,
    timeout: float,
    namespace: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Delete job NAME: its Jobs, pods, Service and NetworkPolicy (foreground). Idempotent.

    A job the operator runs is deleted by deleting its MultiWorkerJob (its children go
    first), so that the operator does not recreate them.

    \b
    Example:
      tflaunch delete mnist -n ml
    """
    cluster = connect(kubeconfig, kube_context)
    from launcher.cluster import apply, operated
    from launcher.core import labels

    ns = namespace or cluster.namespace  # a server never reached fails here, at once
    jobs = cluster.list_objects("Job", ns, labels.job_selector_string(name))
    if operated.operator_job(cluster, name, ns, jobs) is not None:
        deleted = operated.delete_multiworkerjob(cluster, name, ns, wait=wait, timeout=timeout)
    else:
        deleted = apply.delete_job(cluster, name, ns, wait=wait, timeout=timeout)
    if not deleted:
        click.echo(f"nothing to delete: no objects of job {name} in namespace {ns}")
        return
    for item in deleted:
        kind, _, obj_name = item.partition("/")
        kind = identity.RESOURCE if kind == "multiworkerjob" else kind
        click.echo(f"{_kind(kind)}/{obj_name} deleted")


COMMANDS = (delete_command,)
