"""`tflaunch validate SPEC`: the spec's checks, then the rendered objects against Kubernetes'
schemas (no cluster)."""

from __future__ import annotations

import click

from launcher.api.spec import MultiWorkerJob
from launcher.cli.options import entrypoint_note, program_args_option, spec_options, with_spec
from launcher.core import exit_policy, render


@click.command("validate")
@spec_options
@program_args_option
@click.option(
    "--kubernetes-version",
    metavar="X.Y",
    help="Validate against this Kubernetes version's schemas (default: newest known).",
)
@click.option("--no-schema", is_flag=True, help="Only the static checks, no schema validation.")
@with_spec
def validate_command(job: MultiWorkerJob, kubernetes_version: str | None, no_schema: bool) -> None:
    """Check the spec and validate the rendered objects against Kubernetes' schemas.

    \b
    Example:
      tflaunch validate examples/mnist.yaml --kubernetes-version 1.29
    """
    from launcher.core import schemas  # optional dependency, only needed here

    objects = render.render(job)
    if job.spec.entrypoint == "image":
        click.echo(entrypoint_note(), err=True)
    if no_schema:
        click.echo(f"ok: {job.name}: spec valid, {len(objects)} objects rendered")
        return
    version = kubernetes_version or schemas.latest_kubernetes_version()
    schemas.check_version(version)
    if _minor(version) < _minor(exit_policy.RESTART_RULES_SINCE) and [
        job for job in objects if exit_policy.drop_container_restart_rules(job)
    ]:  # as submit applies the job there (launcher.cluster.apply)
        click.echo(
            f"note: Kubernetes {version} has no container restartPolicyRules (since "
            f"{exit_policy.RESTART_RULES_SINCE}): checked without them, as submit applies the "
            "job there; a killed container then fails its pod, which is recreated",
            err=True,
        )
    schemas.validate_objects(objects, version)
    click.echo(f"ok: {job.name}: {len(objects)} objects valid against Kubernetes {version} schemas")


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


COMMANDS = (validate_command,)
