"""`submit --dry-run[=client|server]`: kubectl's flag, with tflaunch's old meaning kept.

kubectl's `--dry-run` takes `none`, `client` or `server`. tflaunch's was a plain flag that
asked the API server to check everything (a server dry run), so the bare flag keeps meaning
`server`, as do the old boolean values of `$TFLAUNCH_SUBMIT_DRY_RUN` (`1`, `true`).

click's optional-value options would take the next word as the value, so `submit --dry-run
job.yaml` would read `job.yaml` as the mode. kubectl takes the value only after `=`; here
the next word is taken only when it is one of the modes, and anything else stays an
argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

MODES = ("none", "client", "server")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


class _DryRunMode(click.Choice[str]):
    """A mode, or one of the old flag's boolean spellings (from the environment)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value).strip().lower()
        if text in _TRUE:
            return "server"
        if text in _FALSE:
            return "none"
        return super().convert(text, param, ctx)


def dry_run_option(func: F) -> F:
    return click.option(
        "--dry-run",
        type=_DryRunMode(MODES),
        default="none",
        help="client: render and check the spec, no cluster needed. server (also the bare "
        "--dry-run): the API server checks and admits every object, nothing is stored.",
    )(func)


class DryRunCommand(click.Command):
    """A command whose `--dry-run` may come without a value (meaning `server`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, with_dry_run_values(args))


def with_dry_run_values(args: list[str]) -> list[str]:
    """`--dry-run` alone -> `--dry-run=server`; `--dry-run client` -> `--dry-run=client`."""
    fixed: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            fixed += [arg, *rest]
            break
        if arg == "--dry-run":
            mode = rest.pop(0) if rest and rest[0] in MODES else "server"
            arg = f"--dry-run={mode}"
        fixed.append(arg)
    return fixed
