"""Durations on the command line: kubectl's spelling (`5m`, `1h30m`, `500ms`) and, as
before, a bare number of seconds, for every --timeout, --pending-warning and --since."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from launcher.cli import durations
from launcher.cli.main import cli


@pytest.mark.parametrize(
    "text, expected",
    [
        ("90", 90.0),
        ("0.5", 0.5),
        ("0", 0.0),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("2m30s", 150.0),
        ("500ms", 0.5),
        (" 10s ", 10.0),
    ],
)
def test_kubectls_spelling_and_bare_seconds(text: str, expected: float) -> None:
    assert durations.seconds(text, "--timeout") == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "-5", "-1s", "5x", "5 m", "m", "1h-30m", "inf", "nan", "5m!"])
def test_anything_else_is_a_usage_error_naming_the_flag(text: str) -> None:
    with pytest.raises(click.BadParameter) as refused:
        durations.seconds(text, "--timeout")
    assert refused.value.param_hint == "--timeout"
    assert "is not a duration; use e.g. 90s, 5m or 1h30m" in refused.value.message


@pytest.mark.parametrize(
    "command",
    [["wait", "x"], ["submit", "job.yaml", "--wait"], ["delete", "x"], ["tensorboard", "x"]],
)
def test_every_timeout_flag_takes_a_duration(command: list[str]) -> None:
    # Parsing fails before anything runs, so a bad value shows the flag took the type.
    refused = CliRunner().invoke(cli, [*command, "--timeout", "5parsecs"])
    assert refused.exit_code == 2
    assert "is not a duration" in refused.output, refused.output
    helped = CliRunner().invoke(cli, [*command[:1], "--help"])
    assert "--timeout DURATION" in helped.output, helped.output
