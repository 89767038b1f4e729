"""What `tflaunch local` shows while the group trains: each worker's state and where training
stands, read from the workers' lines, and drawn as a few lines of text.

Pure (no terminal, no clock: `elapsed` is passed in), so the drawing is tested with strings;
`launcher.local.display` puts it on the terminal. The states follow the trainer's own log
lines (`waiting up to 300s for peers ...`, `all 1 peers reachable ...`), the chief's
`TFLAUNCH_PROGRESS` lines, and the exit codes the runner sees.
"""

from __future__ import annotations

import dataclasses
import re

from launcher.core import contract
from launcher.core import progress as progress_lib
from launcher.core.progress import Progress
from launcher.core.worker_end import WorkerEnd

STARTING = "starting"
WAITING = "waiting for peers"
TRAINING = "training"
RESTARTING = "restarting"
DONE = "done"
STOPPED = "stopped"

WAITING_LINE = re.compile(r"^waiting up to \S+ for peers")
TRAINING_LINE = re.compile(r"^(all \d+ peers reachable|no multi-worker TF_CONFIG|strategy ready)")
"""The trainer's INFO messages that start and end the rendezvous."""

ONE_LINE_PER_WORKER = 8
"""Up to this many workers get a status line each; more are summed up by state."""
BAR_WIDTH = 20

_COLORS = {"green": "32", "yellow": "33", "red": "31", "dim": "2", "bold": "1", "cyan": "36"}
_STATE_COLORS = {TRAINING: "green", WAITING: "yellow", RESTARTING: "yellow", DONE: "cyan",
                 STARTING: "dim", STOPPED: "dim"}  # fmt: skip


def paint(text: str, color: str | None, enabled: bool) -> str:
    """`text` in an ANSI color when `enabled` (a terminal, and no NO_COLOR)."""
    if not enabled or color is None:
        return text
    return f"\x1b[{_COLORS[color]}m{text}\x1b[0m"


def exit_state(code: int | None) -> str:
    """A finished worker's state: done, stopped (by the runner), or how it failed."""
    if code is None:
        return STOPPED
    if code == contract.EXIT_OK:
        return DONE
    return WorkerEnd(0, code).how().removeprefix("was ")  # the words every reader uses


@dataclasses.dataclass
class Board:
    """The group's live state."""

    name: str
    workers: int
    states: list[str] = dataclasses.field(default_factory=list)
    progress: Progress | None = None
    """The chief's latest progress (kept across a group restart until a new one comes)."""
    progress_at: float = 0.0
    """The elapsed time at which `progress` came (the bar moves on from there)."""
    restarts: int = 0

    def __post_init__(self) -> None:
        self.states = self.states or [STARTING] * self.workers

    def read(self, index: int, line: str, elapsed: float = 0.0) -> Progress | None:
        """Take in one line of worker `index` at `elapsed`; the progress in it, if any (chief
        only)."""
        found = progress_lib.parse_line(line) if index == 0 else None
        if found is not None:
            self.progress, self.progress_at = found, elapsed
            for i, state in enumerate(self.states):
                if state in (STARTING, WAITING):
                    self.states[i] = TRAINING
            return found
        match = contract.TRAINER_LOG_LINE.match(line)
        if match is not None and self.states[index] in (STARTING, WAITING, RESTARTING):
            message = match.group("message")
            if WAITING_LINE.match(message):
                self.states[index] = WAITING
            elif TRAINING_LINE.match(message):
                self.states[index] = TRAINING
        return None

    def exited(self, index: int, code: int | None) -> None:
        self.states[index] = exit_state(code)

    def restarted(self, restarts: int) -> None:
        """A new attempt of the whole group begins."""
        self.restarts = restarts
        self.states = [RESTARTING] * self.workers

    # --- drawing ----------------------------------------------------------------------------

    def headline(self, elapsed: float, color: bool = False, width: int = 0) -> str:
        """The progress bar line: name, epoch, bar, step, loss, images/s, ETA, elapsed.

        When it does not fit in `width` columns, the least useful parts go first (elapsed
        time, images/s, loss, the bar), so that epoch, step and ETA stay on a narrow terminal.
        """
        reported = self.progress
        parts: list[tuple[int, str]] = [(9, paint(self.name, "bold", color))]  # (keep rank, text)
        if reported is None:
            parts.append((8, self._summary()))
        else:
            p = progress_lib.extrapolated(reported, elapsed - self.progress_at)
            about = "~" if p.step != reported.step else ""  # an estimate until the next report
            filled = round(BAR_WIDTH * p.fraction)
            bar = paint("█" * filled, "green", color)
            bar += paint("░" * (BAR_WIDTH - filled), "dim", color)
            parts += [(8, f"epoch {p.epoch}/{p.epochs}"), (3, f"{bar} {p.fraction:4.0%}"),
                      (7, f"step {about}{p.step}/{p.steps}")]  # fmt: skip
            if p.loss is not None:
                parts.append((4, f"loss {p.loss:.4f}"))
            if p.images_per_sec is not None:
                parts.append((2, f"{p.images_per_sec:,.0f} img/s"))
            if p.eta_seconds is not None:
                parts.append((6, f"ETA {progress_lib.duration(p.eta_seconds)}"))
        parts.append((1, paint(f"[{progress_lib.duration(elapsed)}]", "dim", color)))
        if self.restarts:
            parts.append((5, paint(f"restart {self.restarts}", "yellow", color)))
        line = "  ".join(text for _, text in parts)
        for rank in range(1, 8):
            if width <= 0 or progress_lib.visible_length(line) <= width:
                break
            line = "  ".join(text for keep, text in parts if keep > rank)
        return line

    def worker_lines(self, color: bool = False) -> list[str]:
        """A line per worker, or one line summing them up when there are many."""
        if self.workers > ONE_LINE_PER_WORKER:
            return [f"  workers: {self._summary(color)}"]
        width = len(str(self.workers - 1))
        return [
            f"  worker {i:<{width}}  {paint(state, _state_color(state), color)}"
            for i, state in enumerate(self.states)
        ]

    def lines(self, elapsed: float, width: int, color: bool = False) -> list[str]:
        """The whole block, each line cut to `width` visible columns."""
        return [
            progress_lib.fit(line, width)
            for line in [self.headline(elapsed, color, width), *self.worker_lines(color)]
        ]

    def plain(self) -> str:
        """One line for logs (no terminal): the progress in words, or the workers' states."""
        if self.progress is None:
            return f"{self.name}: {self._summary()}"
        return f"{self.name}: {progress_lib.describe(self.progress)}"

    def _summary(self, color: bool = False) -> str:
        """`2 waiting for peers, 1 training (worker 2)`: workers by state."""
        counts: dict[str, list[int]] = {}
        for i, state in enumerate(self.states):
            counts.setdefault(state, []).append(i)
        parts = []
        for state, indices in counts.items():
            text = f"{len(indices)} {state}"
            if len(indices) < self.workers and len(indices) <= 3:
                text += f" (worker{'s' if len(indices) > 1 else ''} {', '.join(map(str, indices))})"
            parts.append(paint(text, _state_color(state), color))
        noun = "worker" if self.workers == 1 else "workers"
        if len(counts) == 1:
            return f"{self.workers} {noun} {self.states[0]}" if self.states else ""
        return ", ".join(parts)


def _state_color(state: str) -> str:
    return _STATE_COLORS.get(state, "red")
