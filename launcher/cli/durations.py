"""Durations on the command line, spelled as kubectl takes them (`--timeout=5m`, `30s`,
`1h30m`, `1.5h`, `500ms`); a bare number is seconds, what tflaunch's flags always took, so
`wait --timeout 3600` and `wait --timeout 1h` are the same wait."""

from __future__ import annotations

import re

import click

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
EXAMPLE = "e.g. 90s, 5m or 1h30m (a bare number is seconds)"


def seconds(text: str, flag: str) -> float:
    """`90`, `2.5`, `30s`, `5m`, `1h30m`, `500ms` -> seconds; anything else (a negative
    value, an unknown unit) is a usage error naming `flag`."""
    text = text.strip()
    value: float | None
    try:
        value = float(text)
    except ValueError:
        value = _with_units(text)
    if value is None or not value >= 0 or value == float("inf"):
        raise click.BadParameter(f"{text!r} is not a duration; use {EXAMPLE}", param_hint=flag)
    return value


def _with_units(text: str) -> float | None:
    parts = list(_PART.finditer(text))
    if not parts or "".join(p.group(0) for p in parts) != text:
        return None
    return sum(float(p.group(1)) * _UNIT_SECONDS[p.group(2)] for p in parts)


class Duration(click.ParamType[float, object]):
    """A click type for a duration flag; the command receives seconds (a float)."""

    name = "duration"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)  # a default given in seconds
        flag = param.opts[0] if param is not None and param.opts else "duration"
        try:
            return seconds(str(value), flag)
        except click.BadParameter as error:
            self.fail(error.message, param, ctx)


DURATION = Duration()
