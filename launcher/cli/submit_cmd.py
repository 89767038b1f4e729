"""`tflaunch submit SPEC`: render the job and apply it (or hand it to the operator with
`--operator`), then `--wait` or say what to run next.

Errors are raised, never printed here: `launcher.cli.main.run` turns them into one line and an
exit code. The cluster verbs are imported inside the command, after connecting: the
kubernetes client takes half a second to import, and `tflaunch render` must not pay for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from launcher.api import identity
from launcher.api.spec import MultiWorkerJob
from launcher.cli import operator_jobs, output
from launcher.cli.dry_run import DryRunCommand, dry_run_option
from launcher.cli.options import (
    cluster_options,
    connect,
    keras_note,
    program_args_option,
    program_name,
    script_warnings,
    spec_options,
    with_spec,
)
from launcher.cli.wait_cmd import wait_for_job, wait_options
from launcher.core import exit_policy, render, restart, runs, workload
from launcher.core.errors import ClusterError, ExitStatus

if TYPE_CHECKING:  # the kubernetes client takes half a second to import: only when used
    from launcher.cluster.client import Cluster


_kind = output.kubectl_kind
"""kubectl's spelling of an object kind in `kind/name`."""


@click.command("submit", cls=DryRunCommand)
@spec_options
@program_args_option
@cluster_options
@click.option("--wait", "wait_for_it", is_flag=True, help="Then wait until the job finishes.")
@wait_options
@click.option(
    "--replace",
    is_flag=True,
    allow_from_autoenv=False,  # deletes the running job: only ever on the command line
    help="Delete the job's existing objects first.",
)
@dry_run_option
@click.option(
    "--operator",
    "through_operator",
    is_flag=True,
    help="Apply it as a MultiWorkerJob for the operator to run (same spec file).",
)
@with_spec
def submit_command(
    job: MultiWorkerJob,
    kubeconfig: str | None,
    kube_context: str | None,
    wait_for_it: bool,
    timeout: float | None,
    pending_warning: float,
    replace: bool,
    dry_run: str,
    through_operator: bool,
) -> int:
    """Render the job and apply it to the cluster (server-side apply, all or nothing).

    \b
    Examples:
      tflaunch submit examples/mnist.yaml --workers 4 --gpus 1 --wait
      tflaunch submit examples/mnist.yaml --replace      # after changing the spec
      tflaunch submit examples/mnist.yaml --operator --wait   # run by `tflaunch operator`
      tflaunch submit examples/mnist.yaml --dry-run=client   # check the spec, no cluster
    """
    if timeout is not None and not wait_for_it:
        raise click.UsageError("--timeout only applies with --wait")
    if dry_run != "none" and wait_for_it:
        raise click.UsageError("--dry-run and --wait cannot be combined")
    note = keras_note(job)
    for line in ([f"tflaunch: note: {note}"] if note else []) + script_warnings(job):
        click.echo(line, err=True)
    if through_operator:
        return _submit_to_operator(
            job, kubeconfig, kube_context, wait_for_it, timeout, pending_warning, replace, dry_run
        )
    objects = render.render(job)
    program = program_name()
    if dry_run == "client":  # rendered and checked as render does; nothing is sent
        for obj in objects:
            click.echo(f"{_kind(obj['kind'])}/{obj['metadata']['name']} rendered (client dry run)")
        click.echo(
            f"nothing was sent to a cluster; --dry-run=server also has the API server check it, "
            f"{program} render shows the objects",
            err=True,
        )
        return ExitStatus.SUCCESS
    cluster = connect(kubeconfig, kube_context)
    from launcher.cluster import apply, find

    # The run whose checkpoints the workers write: the one the Jobs already have (an
    # unchanged resubmit), a new one (a new submission; --replace is one), or the spec's.
    kept = None if replace else find.checkpoint_run(cluster, job.name, job.namespace)
    job = runs.with_run(job, runs.new_run_id() if kept is None else kept)
    objects = render.render(job)
    if (no_fit := _no_node_fits(cluster, objects, job.spec.node_selector)) is not None:
        click.echo(no_fit, err=True)
    server_dry_run = dry_run == "server"
    applied = apply.apply_job(
        cluster, objects, replace=replace, dry_run=server_dry_run, program=program
    )
    _say_applied([f"{_kind(item.kind)}/{item.name} {item.action}" for item in applied], dry_run)
    if server_dry_run:
        return ExitStatus.SUCCESS
    if restart.in_place(job.spec) and any(item.action != "unchanged" for item in applied):
        _note_dropped_restart_rules(cluster, objects)
    if all(item.action == "unchanged" for item in applied) and not replace:
        click.echo(f"job {job.name} is already submitted with this spec: nothing to do", err=True)
    elif job.spec.checkpoint.claim_name and job.spec.checkpoint.run not in (None, kept):
        run = job.spec.checkpoint.run
        click.echo(
            f"checkpoint run {run}: {workload.pod_paths(job)[0]} on claim "
            f"{job.spec.checkpoint.claim_name}; to continue it in a later submission: "
            f"--set spec.checkpoint.run={run}",
            err=True,
        )
    follow = f"{program} logs {job.name} -n {job.namespace} -f"
    return _wait_or_next(cluster, job, wait_for_it, timeout, pending_warning, follow)


def _submit_to_operator(
    job: MultiWorkerJob,
    kubeconfig: str | None,
    kube_context: str | None,
    wait_for_it: bool,
    timeout: float | None,
    pending_warning: float,
    replace: bool,
    dry_run: str,
) -> int:
    """`submit --operator`: apply the MultiWorkerJob; the operator renders and runs it."""
    document = operator_jobs.document_of(job)
    if dry_run == "client":
        click.echo(f"{_kind(str(document['kind']))}/{job.name} rendered (client dry run)")
        return ExitStatus.SUCCESS
    cluster = connect(kubeconfig, kube_context)
    from launcher.cluster import operated

    program = program_name()
    server_dry_run = dry_run == "server"
    action = operated.apply_multiworkerjob(
        cluster, document, dry_run=server_dry_run, replace=replace, program=program
    )
    _say_applied([f"{identity.RESOURCE}/{job.name} {action}"], dry_run)
    if server_dry_run:
        return ExitStatus.SUCCESS
    if action == "configured":
        click.echo(
            "note: the operator applies a changed spec only while the job is suspended "
            f"(spec.suspend); see kubectl describe mwj {job.name} -n {job.namespace}",
            err=True,
        )
    follow = f"kubectl describe mwj {job.name} -n {job.namespace}"
    return _wait_or_next(cluster, job, wait_for_it, timeout, pending_warning, follow)


def _no_node_fits(
    cluster: Cluster, objects: list[dict[str, Any]], node_selector: Mapping[str, str]
) -> str | None:
    """A warning when no node could ever hold one worker (its requests above every node's
    allocatable): the job would stay Pending. Not a refusal: a cluster autoscaler may add a
    node that fits. None when it fits, or when the nodes cannot be read (RBAC)."""
    from launcher.cluster import doctor

    try:
        nodes = cluster.list_objects("Node")
    except ClusterError:  # Forbidden (RBAC) included: the apply says what it must
        return None
    jobs = [o for o in objects if o["kind"] == "Job"]
    check = doctor.check_fit(nodes, doctor.needs_of(jobs), node_selector)
    if not check.failed:
        return None
    return f"{program_name()}: warning: {check.detail}: the workers would stay Pending; {check.fix}"


def _note_dropped_restart_rules(cluster: Cluster, objects: list[dict[str, Any]]) -> None:
    """Say once when the server did not keep the container restart rule it was given."""
    job = next(o for o in objects if o["kind"] == "Job")
    try:
        stored = cluster.get("Job", job["metadata"]["name"], job["metadata"]["namespace"])
    except ClusterError:
        return
    if exit_policy.restart_rules_dropped(stored):
        click.echo(f"{program_name()}: note: {exit_policy.RESTART_RULES_DROPPED}", err=True)


def _say_applied(lines: list[str], dry_run: str) -> None:
    """One line per object applied, marked when the server only checked it."""
    suffix = " (server dry run)" if dry_run == "server" else ""
    for line in lines:
        click.echo(f"{line}{suffix}")


def _wait_or_next(
    cluster: Cluster,
    job: MultiWorkerJob,
    wait_for_it: bool,
    timeout: float | None,
    pending_warning: float,
    follow: str,
) -> int:
    """The end of a submission: wait for the job (--wait), or say what to run next."""
    if wait_for_it:
        return wait_for_job(cluster, job.name, job.namespace, timeout, pending_warning)
    click.echo(f"next: {program_name()} wait {job.name} -n {job.namespace}  |  {follow}", err=True)
    return ExitStatus.SUCCESS


COMMANDS = (submit_command,)
