"""`tflaunch plot`: one or several result.json files drawn side by side into a PNG.

matplotlib is the optional `plot` extra, imported (by `launcher.core.curves.draw`) only when
this command runs; without it the command says in one line how to install it.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from launcher.core import contract, curves
from launcher.core.errors import ExitStatus, SpecError, TflaunchError

DEFAULT_OUTPUT = "tflaunch-plot.png"


class MatplotlibMissing(TflaunchError):
    """matplotlib is not installed."""

    exit_status = ExitStatus.BAD_INPUT


def run_label(path: Path) -> str:
    """A run's name: its result.json's directory, or the one above when that is the model
    directory (`tflaunch-runs/mnist/model/result.json` -> `mnist`)."""
    directory = path.resolve().parent
    if directory.name == "model" and directory.parent.name:
        return directory.parent.name
    return directory.name or str(path)


def read_run(path: Path, label: str) -> curves.Curves:
    """One result.json as curves; a file that is not one is a SpecError naming it."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SpecError(str(path), f"cannot be read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise SpecError(
            str(path),
            f"is not a {contract.RESULT_FILE} (not text); pass a run's {contract.RESULT_FILE} "
            "(tflaunch local: tflaunch-runs/NAME/model/result.json)",
        ) from None
    except ValueError as error:
        raise SpecError(
            str(path), f"is not JSON ({error}); pass a {contract.RESULT_FILE}"
        ) from None
    if not isinstance(result, dict):
        raise SpecError(str(path), f"is not a {contract.RESULT_FILE} (a JSON object)")
    try:
        return curves.curves_of(result, label)
    except ValueError as error:
        raise SpecError(str(path), str(error)) from None


@click.command("plot")
@click.argument(
    "results",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="RESULT.json...",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_OUTPUT,
    show_default=True,
    help="The PNG to write.",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="NAME",
    help="A run's name in the picture, once per RESULT in order (default: its directory).",
)
@click.option("--title", help="A title above the runs.")
def plot_command(
    results: tuple[Path, ...], output: Path, labels: tuple[str, ...], title: str | None
) -> None:
    """Draw runs side by side: loss and accuracy per epoch, train and test, restarts marked.

    Needs matplotlib: pip install 'tflaunch[plot]'.

    \b
    Examples:
      tflaunch plot tflaunch-runs/mnist/model/result.json
      tflaunch plot one/model/result.json two/model/result.json --label '1 worker' \\
          --label '2 workers' -o compare.png
    """
    if labels and len(labels) != len(results):
        raise click.BadParameter(
            f"{len(labels)} label(s) for {len(results)} result(s); give one per RESULT or none",
            param_hint="--label",
        )
    names = labels or tuple(run_label(path) for path in results)
    runs = [read_run(path, name) for path, name in zip(results, names, strict=True)]
    try:
        written = curves.draw(runs, output, title)
    except curves.PlotUnavailable:
        raise MatplotlibMissing(
            f"tflaunch plot needs matplotlib, which is not installed: {curves.INSTALL_HINT}"
        ) from None
    width, height = curves.size_px(len(runs))
    click.echo(f"{written} ({width}x{height}, {len(runs)} run(s))")


COMMANDS = (plot_command,)
