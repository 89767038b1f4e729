"""`tflaunch completion bash|zsh|fish`: click's shell completion script, job names included
(`launcher.cli.completion`)."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

from launcher.cli.completion import COMPLETE_VAR

SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion_command(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script for SHELL (commands, flags and job names).

    \b
    Examples:
      source <(tflaunch completion bash)                  # in ~/.bashrc
      tflaunch completion zsh > "${fpath[1]}/_tflaunch"   # zsh, then restart it
      tflaunch completion fish > ~/.config/fish/completions/tflaunch.fish
    """
    root = ctx.find_root().command
    completer = get_completion_class(shell)
    assert completer is not None  # one of click's built-in shells
    click.echo(completer(root, {}, "tflaunch", COMPLETE_VAR).source())


COMMANDS = (completion_command,)
