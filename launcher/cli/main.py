"""The `tflaunch` command: the click group, and the one place that maps errors to exit codes.

`main()` (through `run()`) is the only place that turns an exception into a message and an
exit code; `cli` (the click group) is the program without error handling, as in httpie's
core. The commands live in one module per family: `spec_cmds` (render, tfconfig, validate),
`local_cmd`, `cluster_cmds` (submit, logs, wait, delete), `get_cmds` (status, list),
`doctor_cmd`, `operator_cmd` and `completion`; `options` holds the flags they share.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from launcher import __version__
from launcher.cli import (
    cluster_cmds,
    completion,
    doctor_cmd,
    get_cmds,
    local_cmd,
    operator_cmd,
    plot_cmd,
    spec_cmds,
    tensorboard_cmd,
)
from launcher.cli.options import program_name
from launcher.core.errors import ExitStatus, TflaunchError, printable


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "TFLAUNCH"}
)
@click.version_option(__version__, prog_name="tflaunch")
def cli() -> None:
    """Run TensorFlow MultiWorkerMirroredStrategy training on Kubernetes (or locally).

    \b
    Examples:
      tflaunch local --workers 2                 # train MNIST on this machine
      tflaunch render examples/mnist.yaml | kubectl apply -f -
      tflaunch submit examples/mnist.yaml --wait
    """


def _one_line(text: str) -> str:
    """One line, and nothing in it a terminal acts on (`errors.printable`)."""
    return printable(" ".join(text.split()))


def run(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code. Every failure becomes one line on stderr."""
    try:
        result: Any = cli.main(args=argv, prog_name=program_name(), standalone_mode=False)
    except click.exceptions.Exit as stop:
        return int(stop.exit_code)
    except click.exceptions.Abort:
        click.echo("tflaunch: interrupted", err=True)
        return ExitStatus.INTERRUPTED
    except KeyboardInterrupt:
        click.echo("tflaunch: interrupted", err=True)
        return ExitStatus.INTERRUPTED
    except click.ClickException as error:
        context = getattr(error, "ctx", None)
        command = context.command_path if context is not None else program_name()
        hint = f" (see '{command} --help')" if isinstance(error, click.UsageError) else ""
        click.echo(f"{command}: error: {_one_line(error.format_message())}{hint}", err=True)
        return ExitStatus.BAD_INPUT
    except TflaunchError as error:
        click.echo(f"{program_name()}: error: {_one_line(str(error))}", err=True)
        return int(error.exit_status)
    except BrokenPipeError:
        return ExitStatus.SUCCESS  # `tflaunch render | head`
    except Exception as error:  # a bug: still one line, the traceback only on request
        if os.environ.get("TFLAUNCH_DEBUG"):
            raise
        click.echo(
            f"tflaunch: internal error: {type(error).__name__}: {_one_line(str(error))} "
            "(rerun with TFLAUNCH_DEBUG=1 for the traceback, and please report it)",
            err=True,
        )
        return ExitStatus.ERROR
    return int(result) if isinstance(result, int) else ExitStatus.SUCCESS


def main() -> None:
    sys.exit(run())


for family in (
    spec_cmds,
    local_cmd,
    cluster_cmds,
    get_cmds,
    doctor_cmd,
    operator_cmd,
    completion,
    plot_cmd,
    tensorboard_cmd,
):
    for command in family.COMMANDS:
        cli.add_command(command)
