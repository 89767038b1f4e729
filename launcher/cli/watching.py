"""What `tflaunch status -w` and `tflaunch list -w` share: kubectl get's watch flags and its
way of printing only what changed."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from launcher.cli import durations, output

if TYPE_CHECKING:  # the kubernetes client takes half a second to import: only when used
    pass


def watch_options(func: output.F) -> output.F:
    """`-w/--watch` and the `--timeout` that ends a watch (exit 0, like Ctrl-C)."""
    func = click.option(
        "--timeout",
        "watch_timeout",
        metavar="DURATION",
        help=f"With --watch: stop after this long, {durations.EXAMPLE} (default: until Ctrl-C).",
    )(func)
    return click.option(
        "-w", "--watch", is_flag=True, help="After the first output, print each change."
    )(func)


def watch_seconds(watch: bool, text: str | None) -> float | None:
    if text is None:
        return None
    if not watch:
        raise click.UsageError("--timeout only applies with -w/--watch")
    return durations.seconds(text, "--timeout")


class Printer:
    """Prints watch output as kubectl get -w does: a table gets its header and first rows
    at once (columns as wide as those need), then a row whenever a row's content changes
    (the ticking AGE aside); a document or a name is printed whole again when it changes
    (YAML documents separated by `---`)."""

    def __init__(self, fmt: str | None, header: list[str] | None = None) -> None:
        self.fmt = fmt
        self.header = header or []
        self.widths = [len(title) for title in self.header]
        self.seen: dict[str, tuple[str, ...]] = {}
        self.printed = False

    def rows(self, rows: dict[str, list[str]]) -> None:
        """Print the rows that changed; the first time, the header with them."""
        changed = {key: cells for key, cells in rows.items() if self._changed(key, cells)}
        if not self.printed:
            for cells in changed.values():
                self.widths = [max(w, len(c)) for w, c in zip(self.widths, cells, strict=True)]
            click.echo(self._line(self.header))
            self.printed = True
        for cells in changed.values():
            click.echo(self._line(cells))

    def _changed(self, key: str, cells: list[str]) -> bool:
        age = self.header.index("AGE") if "AGE" in self.header else None
        comparable = tuple(c for i, c in enumerate(cells) if i != age)
        if self.seen.get(key) == comparable:
            return False
        self.seen[key] = comparable
        return True

    def _line(self, cells: list[str]) -> str:
        return "   ".join(c.ljust(w) for c, w in zip(cells, self.widths, strict=True)).rstrip()

    def note(self, key: str, line: str) -> None:
        """Print a line of a table's watch (not a row) unless it is what `key` printed last."""
        if self.seen.get(key) != (line,):
            self.seen[key] = (line,)
            click.echo(line)

    def text(self, key: str, text: str) -> None:
        """Print `text` unless it is what `key` printed last."""
        if self.seen.get(key) == (text,):
            return
        if self.printed and self.fmt == "yaml":
            click.echo("---")
        self.seen[key] = (text,)
        self.printed = True
        click.echo(text)


def until(deadline: float | None) -> bool:
    return deadline is None or time.monotonic() < deadline
