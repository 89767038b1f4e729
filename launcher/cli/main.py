"""The `tflaunch` command: the click group, and the one place that maps errors to exit codes.

`main()` (through `run()`) is the only place that turns an exception into a message and an
exit code; `cli` (the click group) is the program without error handling, as in httpie's
core. Each command lives in its own module, `<command>_cmd.py` (render_cmd, submit_cmd,
status_cmd, ...), whose COMMANDS this module adds to the group; the modules without the
suffix are what they share (`options`: the flags; `output`: the printing; `watching`: -w).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from typing import Any

import click

from launcher import __version__
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


def _add_commands() -> None:
    """Every `launcher/cli/*_cmd.py` module's COMMANDS: a new command is one new module."""
    package = importlib.import_module("launcher.cli")
    for module in sorted(m.name for m in pkgutil.iter_modules(package.__path__)):
        if module.endswith("_cmd"):
            for command in importlib.import_module(f"launcher.cli.{module}").COMMANDS:
                cli.add_command(command)


_add_commands()
