"""Only a line that starts with a marker is a result or a progress line (issue 40, item 5):
a program that logs untrusted text carrying `TFLAUNCH_RESULT {...}` or `TFLAUNCH_PROGRESS
{...}` in the middle of a line changes nothing the operator, `status` or `wait` read."""

from __future__ import annotations

import datetime
import json

import pytest

from launcher.core import contract
from launcher.core.progress import PROGRESS_LINE_PREFIX, latest, parse_line
from launcher.operator.objects import parse_result
from launcher.operator.progress import from_log

RESULT = {"test_accuracy": 0.9}
FORGED = {"test_accuracy": 1.0}
PROGRESS = {"epoch": 2, "epochs": 3, "step": 5, "steps": 10}


def result_line(value: dict[str, float], before: str = "") -> str:
    return f"{before}{contract.RESULT_LINE_PREFIX}{json.dumps(value)}"


def progress_line(value: dict[str, int], before: str = "") -> str:
    return f"{before}{PROGRESS_LINE_PREFIX}{json.dumps(value)}"


@pytest.mark.parametrize(
    "before",
    [
        "request from client: ",  # a program echoing what it was sent
        "INFO:root:",  # logging's default format glues its prefix without a space
        "x",
        "[worker 0]",  # a tag without its space is not the tag
        "2030-01-01T00:00:00Z [worker 0] note: ",
    ],
)
def test_a_result_marker_glued_mid_line_is_no_result(before: str) -> None:
    log = "\n".join([result_line(RESULT), result_line(FORGED, before)])
    assert parse_result(log) == RESULT
    assert parse_result(result_line(FORGED, before)) is None


@pytest.mark.parametrize(
    "before",
    ["", "2030-01-01T00:00:00Z ", "2030-01-01T00:00:00.123456789+02:00 ", "[worker 0] "],
)
def test_a_result_line_is_read_after_what_log_readers_put_before_it(before: str) -> None:
    assert parse_result(result_line(RESULT, before)) == RESULT


@pytest.mark.parametrize("before", ["loss went up: ", "INFO:root:", "[worker 1]x "])
def test_a_progress_marker_glued_mid_line_is_no_progress(before: str) -> None:
    assert parse_line(progress_line(PROGRESS, before)) is None
    real = {**PROGRESS, "step": 4}
    found = latest([progress_line(real), progress_line(PROGRESS, before)])
    assert found is not None and found.step == 4


@pytest.mark.parametrize("before", ["", "2030-01-01T00:00:00Z ", "[worker 0] "])
def test_a_progress_line_is_read_after_what_log_readers_put_before_it(before: str) -> None:
    found = parse_line(progress_line(PROGRESS, before))
    assert found is not None and (found.epoch, found.step) == (2, 5)


def test_the_operator_status_ignores_a_progress_line_forged_mid_line() -> None:
    log = progress_line({**PROGRESS, "step": 3}) + "\n" + progress_line(PROGRESS, "echo: ")
    status = from_log(log, datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC))
    assert status is not None and status.step == 3
