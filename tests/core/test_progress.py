"""The chief's `TFLAUNCH_PROGRESS {json}` line: what the trainer prints is what every reader
(local bar, operator, wait/status) parses, and nothing else is taken for it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launcher.core import progress
from launcher.core.progress import Progress

SAMPLE = Progress(2, 5, 120, 469, 0.1234567, 3456.78, 80.04)


def test_a_line_reads_back_as_what_was_printed() -> None:
    line = progress.format_line(SAMPLE)
    assert line.startswith("TFLAUNCH_PROGRESS {")
    assert progress.parse_line(line) == Progress(2, 5, 120, 469, 0.123457, 3456.8, 80.0)
    assert list(json.loads(line.split(" ", 1)[1])) == [
        "epoch", "epochs", "step", "steps", "loss", "images_per_sec", "eta_seconds",
    ]  # fmt: skip


@given(
    epoch=st.integers(1, 10**6), epochs=st.integers(1, 10**6), step=st.integers(0, 10**9),
    steps=st.integers(0, 10**9),
    loss=st.none() | st.floats(allow_nan=True, allow_infinity=True),
    rate=st.none() | st.floats(min_value=0, allow_infinity=False),
)  # fmt: skip
def test_any_printed_line_parses_with_its_counts_intact(
    epoch: int, epochs: int, step: int, steps: int, loss: float | None, rate: float | None
) -> None:
    line = progress.format_line(Progress(epoch, epochs, step, steps, loss, rate))
    parsed = progress.parse_line(line)
    assert parsed is not None
    assert parsed.position() == (epoch, step) and (parsed.epochs, parsed.steps) == (epochs, steps)


@pytest.mark.parametrize(
    "line",
    [
        "12:00:01 [worker 0/2] INFO epoch 1/2: loss=0.1",
        "TFLAUNCH_PROGRESS not json",
        'TFLAUNCH_PROGRESS {"epoch": 0, "epochs": 2, "step": 1, "steps": 3}',
        'TFLAUNCH_PROGRESS {"epoch": 1, "epochs": 2, "step": -1, "steps": 3}',
        'TFLAUNCH_PROGRESS {"epoch": "1", "epochs": 2, "step": 1, "steps": 3}',
        'TFLAUNCH_PROGRESS {"epoch": true, "epochs": 2, "step": 1, "steps": 3}',
        "TFLAUNCH_PROGRESS [1, 2]",
        'xTFLAUNCH_PROGRESS {"epoch": 1, "epochs": 2, "step": 1, "steps": 3}',
    ],
)
def test_anything_else_is_not_progress(line: str) -> None:
    assert progress.parse_line(line) is None


def test_prefixes_of_log_collectors_are_tolerated_and_bad_numbers_dropped() -> None:
    body = '{"epoch": 1, "epochs": 2, "step": 3, "steps": 4, "loss": "x", "eta_seconds": -1}'
    parsed = progress.parse_line(f"2026-11-30T12:00:00Z [worker 0] TFLAUNCH_PROGRESS {body}")
    assert parsed == Progress(1, 2, 3, 4, None, None, None)


def test_the_latest_progress_of_a_log_tail_is_the_last_one() -> None:
    lines = [
        progress.format_line(Progress(1, 2, 5, 10)),
        "12:00:01 [worker 0/2] INFO epoch 1/2: loss=0.1",
        progress.format_line(Progress(2, 2, 3, 10)),
        "TFLAUNCH_RESULT {}",
    ]
    assert progress.latest(lines) == Progress(2, 2, 3, 10)
    assert progress.latest(["nothing"]) is None


def test_eta_is_the_remaining_steps_at_the_measured_rate() -> None:
    assert progress.eta_seconds(30, 100, 20, 10.0) == pytest.approx(35.0)
    assert progress.eta_seconds(100, 100, 20, 10.0) == 0
    assert progress.eta_seconds(1, 100, 0, 0.0) is None  # no rate before a second execution


def test_words_and_width() -> None:
    assert progress.describe(SAMPLE) == (
        "epoch 2/5, step 120/469, loss 0.1235, 3457 images/s, ETA 1m20s"
    )
    assert progress.describe(Progress(1, 1, 0, 0)) == "epoch 1/1, step 0/0"
    assert progress.duration(7325) == "2h02m" and progress.duration(59.6) == "1m00s"
    assert progress.fit("abcdef", 4) == "abc…" and progress.fit("abc", 4) == "abc"
    assert SAMPLE.fraction == pytest.approx((469 + 120) / (5 * 469))
