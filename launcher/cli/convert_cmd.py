"""`tflaunch convert TFJOB`: the MultiWorkerJob equivalent of a Kubeflow TFJob manifest."""

from __future__ import annotations

import click

from launcher.core import load, tfjob, yamldoc
from launcher.core.errors import SpecError


@click.command("convert")
@click.argument("tfjob_file", metavar="TFJOB")
def convert_command(tfjob_file: str) -> None:
    """Print the MultiWorkerJob that runs a TFJob manifest, with its differences as comments.

    \b
    Example:
      tflaunch convert tfjob.yaml > job.yaml
    """
    document = yamldoc.read_document(tfjob_file)
    if not tfjob.is_tfjob(document):
        raise SpecError("kind", f"expected a {tfjob.TFJOB_KIND} ({tfjob.TFJOB_API_VERSION})")
    converted = tfjob.to_multiworkerjob(document)
    load.job_from_document(converted)  # what is printed is a valid MultiWorkerJob
    for line in tfjob.notes(document):
        click.echo(f"# {line}")
    click.echo(yamldoc.dump(converted), nl=False)


COMMANDS = (convert_command,)
