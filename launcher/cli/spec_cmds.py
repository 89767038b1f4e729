"""The commands that only read a spec: render, tfconfig, validate. No cluster, no TensorFlow."""

from __future__ import annotations

import json
from pathlib import Path

import click

from launcher.api.spec import MultiWorkerJob
from launcher.cli.options import spec_options, with_spec
from launcher.core import render, tfconfig


@click.command("render")
@spec_options
@click.option(
    "-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True
)
@click.option(
    "--out-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write one file per object here instead of stdout.",
)
@with_spec
def render_command(job: MultiWorkerJob, output: str, out_dir: Path | None) -> None:
    """Render the job's Kubernetes objects (Service, NetworkPolicy, Jobs).

    \b
    Example:
      tflaunch render examples/mnist.yaml --workers 4 --gpus 1 | kubectl apply -f -
    """
    objects = render.render(job)
    if out_dir is not None:
        for path in render.write_out_dir(objects, out_dir):
            click.echo(str(path))
        return
    click.echo(render.to_json(objects) if output == "json" else render.to_yaml(objects), nl=False)


@click.command("tfconfig")
@spec_options
@click.option("--index", type=int, help="Worker index; default: every worker, one per line.")
@with_spec
def tfconfig_command(job: MultiWorkerJob, index: int | None) -> None:
    """Print the TF_CONFIG that worker INDEX receives in the cluster.

    \b
    Example:
      tflaunch tfconfig examples/mnist.yaml --index 1
    """
    if index is not None and not 0 <= index < job.spec.workers:
        raise click.BadParameter(
            f"must be between 0 and {job.spec.workers - 1} (spec.workers is {job.spec.workers})",
            param_hint="--index",
        )
    indices = range(job.spec.workers) if index is None else [index]
    for i in indices:
        click.echo(json.dumps(tfconfig.job_tf_config(job, i)))


@click.command("validate")
@spec_options
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
    if no_schema:
        click.echo(f"ok: {job.name}: spec valid, {len(objects)} objects rendered")
        return
    version = kubernetes_version or schemas.latest_kubernetes_version()
    schemas.validate_objects(objects, version)
    click.echo(f"ok: {job.name}: {len(objects)} objects valid against Kubernetes {version} schemas")


COMMANDS = (render_command, tfconfig_command, validate_command)
