"""`tflaunch render SPEC`: the job's Kubernetes objects, as YAML or JSON (no cluster)."""

from __future__ import annotations

from pathlib import Path

import click

from launcher.api.spec import MultiWorkerJob
from launcher.cli.options import entrypoint_note, program_args_option, spec_options, with_spec
from launcher.core import render


@click.command("render")
@spec_options
@program_args_option
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
    if job.spec.entrypoint == "image":
        click.echo(entrypoint_note(), err=True)
    if out_dir is not None:
        for path in render.write_out_dir(objects, out_dir):
            click.echo(str(path))
        return
    click.echo(render.to_json(objects) if output == "json" else render.to_yaml(objects), nl=False)


COMMANDS = (render_command,)
