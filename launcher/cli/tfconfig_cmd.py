"""`tflaunch tfconfig SPEC`: the TF_CONFIG each worker receives in the cluster (no cluster)."""

from __future__ import annotations

import json

import click

from launcher.api.spec import MultiWorkerJob
from launcher.cli.options import spec_options, with_spec
from launcher.core import tfconfig


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


COMMANDS = (tfconfig_command,)
