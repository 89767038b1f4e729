"""The chief's progress line, `TFLAUNCH_PROGRESS {json}`: its format, its parser, its words.

The trainer (`trainer.progress.ProgressCallback`) prints it; `tflaunch local` draws its bar
from it, the operator copies the latest one into the MultiWorkerJob's `status.progress`, and
`tflaunch wait`/`status` show it. One module for all of them, pure (no TensorFlow, no
Kubernetes), like `launcher.core.contract`.

A line is printed at most every few seconds and at each epoch's end, never per step: reading
the loss from the device is a host sync, which is what a per-step line would cost.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from launcher.core import contract, untrusted

PROGRESS_LINE_PREFIX = "TFLAUNCH_PROGRESS "
"""The chief prints `TFLAUNCH_PROGRESS {"epoch": 2, "epochs": 5, ...}` on stdout."""


@dataclasses.dataclass(frozen=True)
class Progress:
    """Where training stands, as the chief last reported it."""

    epoch: int
    """The epoch being trained, counted from 1."""
    epochs: int
    step: int
    """Steps done in this epoch (0..steps); `steps` at the epoch's end."""
    steps: int
    """Steps per epoch."""
    loss: float | None = None
    """The epoch's running mean training loss so far."""
    images_per_sec: float | None = None
    """Global throughput (all workers), when the global batch size is known."""
    eta_seconds: float | None = None
    """Time left for training (not evaluation or export), from the measured step rate."""
    generation: int | None = None
    """The group restarts behind the chief's program when it printed this
    ($TFLAUNCH_RESTARTS): with `spec.restart: inPlace` the pods stay, so only the program
    knows how often the group started again."""

    @property
    def epoch_done(self) -> bool:
        return self.steps > 0 and self.step >= self.steps

    @property
    def fraction(self) -> float:
        """How much of all training is done, 0..1."""
        total = self.epochs * self.steps
        if total <= 0:
            return 0.0
        return min(1.0, max(0.0, ((self.epoch - 1) * self.steps + self.step) / total))

    def position(self) -> tuple[int, int]:
        """(epoch, step): grows monotonically while one attempt trains."""
        return self.epoch, self.step


def extrapolated(progress: Progress, seconds: float) -> Progress:
    """Where training likely stands `seconds` after `progress` was reported, at the rate its
    ETA implies: the chief reports only between two executions of `steps_per_execution`
    steps (32 by default, 10 s and more on CPU), and a bar that stands still that long looks
    hung. Never past the epoch's last step but one (the epoch's end is reported exactly)."""
    eta = progress.eta_seconds
    total = progress.epochs * progress.steps
    done = (progress.epoch - 1) * progress.steps + progress.step
    if eta is None or eta <= 0 or seconds <= 0 or progress.epoch_done or done >= total:
        return progress
    step = progress.step + int((total - done) / eta * seconds)
    step = min(step, progress.steps - 1)
    if step <= progress.step:
        return progress
    return dataclasses.replace(progress, step=step, eta_seconds=max(0.0, eta - seconds))


def format_line(progress: Progress) -> str:
    """The line the chief prints (one line, keys in a fixed order)."""
    document = {  # int(): Keras may hand numpy integers, which json cannot write
        "epoch": int(progress.epoch),
        "epochs": int(progress.epochs),
        "step": int(progress.step),
        "steps": int(progress.steps),
        "loss": _rounded(progress.loss, 6),
        "images_per_sec": _rounded(progress.images_per_sec, 1),
        "eta_seconds": _rounded(progress.eta_seconds, 1),
    }
    if progress.generation:
        document["generation"] = int(progress.generation)
    return PROGRESS_LINE_PREFIX + json.dumps(document)


def _rounded(value: float | None, digits: int) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)


def parse_line(line: str) -> Progress | None:
    """The progress in one log line, else None (any other line, or a malformed one).

    The marker counts at the start of the line only, after what `kubectl logs --timestamps`
    or `tflaunch logs` put there (`contract.after_marker`): glued mid-line it is not progress.
    """
    tail = contract.after_marker(line, PROGRESS_LINE_PREFIX)
    if tail is None:
        return None
    return from_document(untrusted.json_object(tail))


def from_document(document: Any) -> Progress | None:
    """A Progress from its JSON object (the line's, or status.progress's snake_case twin)."""
    if not isinstance(document, Mapping):
        return None
    counts = [_count(document.get(key)) for key in ("epoch", "epochs", "step", "steps")]
    if any(count is None for count in counts):
        return None
    epoch, epochs, step, steps = (int(c or 0) for c in counts)
    if epoch < 1 or epochs < 1 or steps < 0:
        return None
    return Progress(
        epoch=epoch,
        epochs=epochs,
        step=step,
        steps=steps,
        loss=_number(document.get("loss")),
        images_per_sec=_number(document.get("images_per_sec")),
        eta_seconds=_number(document.get("eta_seconds")),
        generation=_count(document.get("generation")),
    )


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def latest(lines: Iterable[str]) -> Progress | None:
    """The last progress among log lines (e.g. the tail of the chief's log)."""
    found = None
    for line in lines:
        progress = parse_line(line)
        if progress is not None:
            found = progress
    return found


# --- ETA -------------------------------------------------------------------------------------


def eta_seconds(
    done_steps: int, total_steps: int, steps_since_start: int, seconds_since_start: float
) -> float | None:
    """Seconds left at the rate measured since the first step of this run; None before a
    rate exists (the first execution includes tracing, so the rate starts after it)."""
    if steps_since_start <= 0 or seconds_since_start <= 0:
        return None
    rate = steps_since_start / seconds_since_start
    return max(0, total_steps - done_steps) / rate


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
"""A terminal color code: it takes no column."""


# --- Words -----------------------------------------------------------------------------------


def duration(seconds: float) -> str:
    """Compact time for an ETA: 45s, 3m12s, 2h05m."""
    total = max(0, round(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def describe(progress: Progress) -> str:
    """One line of words: `epoch 2/5, step 120/469, loss 0.1234, 3456 images/s, ETA 1m20s`."""
    parts = [f"epoch {progress.epoch}/{progress.epochs}", f"step {progress.step}/{progress.steps}"]
    if progress.loss is not None:
        parts.append(f"loss {progress.loss:.4f}")
    if progress.images_per_sec is not None:
        parts.append(f"{progress.images_per_sec:.0f} images/s")
    if progress.eta_seconds is not None:
        parts.append(f"ETA {duration(progress.eta_seconds)}")
    return ", ".join(parts)


def visible_length(text: str) -> int:
    """Columns `text` takes on a terminal (color codes take none)."""
    return len(_ANSI.sub("", text))


def fit(text: str, width: int) -> str:
    """`text` (which may hold color codes) cut to `width` visible columns with an ellipsis,
    so that a terminal line never wraps (a redraw counts lines)."""
    if width <= 0 or visible_length(text) <= width:
        return text
    out, visible = [], 0
    for piece in re.split(f"({_ANSI.pattern})", text):
        if _ANSI.fullmatch(piece):
            out.append(piece)
            continue
        room = width - 1 - visible
        if room <= 0:
            continue
        out.append(piece[:room])
        visible += len(piece[:room])
    return "".join(out) + "…" + ("\x1b[0m" if _ANSI.search(text) else "")
