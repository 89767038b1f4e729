"""The `tflaunch local` console: what the runner's events become on the screen.

Three ways to show a running group, chosen by `make_console`:

* `LiveConsole`, on a terminal: one progress bar for the group (the chief's progress: epoch,
  step/steps, loss, images/s, ETA) and a status line per worker, redrawn in place; above it,
  the lines that matter (any worker's warnings and errors, tflaunch's own messages, one line
  per finished epoch). Colors unless NO_COLOR is set.
* The same with `live=False`, off a terminal (CI, pipes): the same lines, and the progress as
  plain lines at most every PLAIN_INTERVAL seconds (and at each epoch's end).
* `LineConsole`, with --verbose: every line of every worker, prefixed `[worker i]`.

Every worker's full output is in WORKDIR/logs/worker-<i>.log whatever the console shows.
The runner calls a console from its reader threads and its main loop: the methods lock.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol, TextIO

from launcher.core import contract
from launcher.core import progress as progress_lib
from launcher.local.board import Board, paint
from launcher.local.console import (
    CPP_CONTINUATION,
    KERAS_PROGRESS_BAR,
    ConsoleFilter,
)

PLAIN_INTERVAL = 5.0
"""Off a terminal, at most one progress line this often (besides each epoch's end)."""
REDRAW_INTERVAL = 0.1
TICK_REDRAW = 1.0
"""On a terminal, redraw at least this often (the elapsed time moves)."""
NOTABLE_LEVELS = ("WARNING", "ERROR", "CRITICAL")


class Console(Protocol):
    """What the runner tells the console."""

    def line(self, index: int, text: str) -> None:
        """Worker `index` printed `text`."""

    def message(self, text: str) -> None:
        """tflaunch's own line (a restart, a resume)."""

    def exited(self, index: int, code: int | None) -> None:
        """Worker `index` ended with `code` (negative: a signal; None: stopped by us)."""

    def restarted(self, restarts: int) -> None:
        """A new attempt of the whole group begins."""

    def tick(self) -> None:
        """Called a few times a second by the runner's main loop."""

    def close(self) -> None:
        """The group is over: leave the last state on the screen."""


def no_color(env: Mapping[str, str]) -> bool:
    """NO_COLOR (no-color.org): set and not empty means no ANSI colors; so does TERM=dumb."""
    return bool(env.get("NO_COLOR")) or env.get("TERM") == "dumb"


def make_console(
    name: str,
    workers: int,
    stream: TextIO,
    verbose: bool,
    env: Mapping[str, str] | None = None,
    own_program: bool = False,
) -> Console:
    """The console for this output: every line (--verbose), live (a terminal) or plain."""
    env = os.environ if env is None else env

    def write(text: str) -> None:
        stream.write(text + "\n")
        stream.flush()

    if verbose:
        return LineConsole(write, verbose=True)
    live = stream.isatty() and env.get("TERM") != "dumb"
    return SummaryConsole(
        Board(name, workers), stream, live=live, color=live and not no_color(env),
        own_program=own_program,
    )  # fmt: skip


class LineConsole:
    """Every shown line prefixed `[worker i]` (with verbose, TensorFlow's C++ lines too)."""

    def __init__(self, write: Callable[[str], None], verbose: bool) -> None:
        self._write = write
        self._verbose = verbose
        self._filters: dict[int, ConsoleFilter] = {}
        self._lock = threading.Lock()

    def line(self, index: int, text: str) -> None:
        with self._lock:
            shown = self._filters.setdefault(index, ConsoleFilter(self._verbose)).shows(text)
            if shown:
                self._write(f"[worker {index}] {text}")

    def message(self, text: str) -> None:
        with self._lock:
            self._write(text)

    def exited(self, index: int, code: int | None) -> None:
        pass

    def restarted(self, restarts: int) -> None:
        pass

    def tick(self) -> None:
        pass

    def close(self) -> None:
        pass


class NotableFilter:
    """Which lines of one worker's stream are worth the console without --verbose: the
    trainer's WARNING and ERROR records (with their continuation lines, e.g. a traceback
    after `log.exception`) and Python tracebacks. Not INFO, not TensorFlow's C++ lines, not
    the progress and result lines (the bar and the final summary say those)."""

    def __init__(self) -> None:
        self._showing = False

    def shows(self, line: str) -> bool:
        match = contract.TRAINER_LOG_LINE.match(line)
        if match is not None:
            self._showing = match.group("level") in NOTABLE_LEVELS
        elif contract.is_cpp_log_start(line) or line.startswith(
            (progress_lib.PROGRESS_LINE_PREFIX, contract.RESULT_LINE_PREFIX)
        ):
            self._showing = False
        elif line.startswith(("Traceback ", "Exception in thread ")):
            self._showing = True
        return self._showing


class OwnOutputFilter:
    """For a program of the user's (spec.command, spec.script): its own output is what the
    user reads, so every line shows but TensorFlow's C++ lines (with the known continuation
    lines of its multi-line messages), the progress and result lines, the worker wrapper's
    INFO records (the worker status lines say those), and the other workers' Keras progress
    bars (the chief's, one clean line per epoch, speaks for the group)."""

    def __init__(self, index: int = 0) -> None:
        self._chief = index == 0
        self._in_cpp_message = False

    def shows(self, line: str) -> bool:
        match = contract.TRAINER_LOG_LINE.match(line)
        if match is not None:
            self._in_cpp_message = False
            return match.group("level") in NOTABLE_LEVELS
        if contract.is_cpp_log_start(line):
            self._in_cpp_message = True
            return False
        if self._in_cpp_message and CPP_CONTINUATION.match(line):
            return False
        self._in_cpp_message = False
        if KERAS_PROGRESS_BAR.match(line):
            return self._chief
        return not line.startswith((progress_lib.PROGRESS_LINE_PREFIX, contract.RESULT_LINE_PREFIX))


class SummaryConsole:
    """The bar and worker states (live) or plain progress lines, and the notable lines."""

    def __init__(
        self,
        board: Board,
        stream: TextIO,
        live: bool,
        color: bool,
        clock: Callable[[], float] = time.monotonic,
        width: Callable[[], int] | None = None,
        own_program: bool = False,
    ) -> None:
        self.board = board
        self._own_program = own_program
        self._stream = stream
        self._live = live
        self._color = color
        self._clock = clock
        self._width = width or (lambda: shutil.get_terminal_size((100, 24)).columns)
        self._lock = threading.Lock()
        self._filters: dict[int, NotableFilter | OwnOutputFilter] = {}
        self._started = clock()
        self._drawn = 0
        """Lines of the block now on the screen (live), to move up over when redrawing."""
        self._last_draw = -float("inf")
        self._dirty = True
        self._last_plain = -float("inf")
        self._plain_said = ""
        self._epoch_said: tuple[int, int] = (0, 0)

    # --- the runner's events ----------------------------------------------------------------

    def line(self, index: int, text: str) -> None:
        with self._lock:
            found = self.board.read(index, text, self._clock() - self._started)
            self._dirty = True
            made = OwnOutputFilter(index) if self._own_program else NotableFilter()
            if self._filters.setdefault(index, made).shows(text):
                if not self._live and self._plain_pending():  # the state it came in, first
                    self._print_plain()
                self._say(self._worker_line(index, text))
            if found is not None and found.epoch_done:
                self._epoch_finished(found)
            self._refresh()

    def message(self, text: str) -> None:
        with self._lock:
            self._say(text)
            self._refresh()

    def exited(self, index: int, code: int | None) -> None:
        with self._lock:
            self.board.exited(index, code)
            self._dirty = True
            self._refresh()

    def restarted(self, restarts: int) -> None:
        with self._lock:
            self.board.restarted(restarts)
            self._filters.clear()
            self._dirty = True
            self._refresh(force=True)

    def tick(self) -> None:
        with self._lock:
            self._refresh()

    def close(self) -> None:
        with self._lock:
            if self._live:
                self._draw()
            elif self._plain_pending():
                self._print_plain()

    # --- drawing ----------------------------------------------------------------------------

    def _worker_line(self, index: int, text: str) -> str:
        match = contract.TRAINER_LOG_LINE.match(text)
        if match is None and self._own_program:
            return f"[worker {index}] {text}"  # the program's own output, as it printed it
        level = match.group("level") if match else "ERROR"  # a traceback's lines
        return paint(f"[worker {index}] {text}", "yellow" if level == "WARNING" else "red",
                     self._color)  # fmt: skip

    def _epoch_finished(self, p: progress_lib.Progress) -> None:
        """One permanent line per finished epoch, above the bar (or in the plain log)."""
        if (p.epoch, self.board.restarts) == self._epoch_said:
            return
        self._epoch_said = (p.epoch, self.board.restarts)
        if self._live:
            self._say(f"{self.board.name}: {progress_lib.describe(p)}")
        else:
            self._print_plain()

    def _say(self, text: str) -> None:
        """A permanent line: above the live block, or simply printed."""
        self._erase()
        self._stream.write(text + "\n")
        self._dirty = True

    def _refresh(self, force: bool = False) -> None:
        now = self._clock()
        if self._live:
            due = now - self._last_draw >= (REDRAW_INTERVAL if self._dirty else TICK_REDRAW)
            if force or self._drawn == 0 or due:
                self._draw()
        elif self._plain_pending() and (force or now - self._last_plain >= PLAIN_INTERVAL):
            self._print_plain()
        self._stream.flush()

    def _draw(self) -> None:
        self._erase()
        lines = self.board.lines(self._clock() - self._started, self._width() - 1, self._color)
        self._stream.write("".join(line + "\n" for line in lines))
        self._stream.flush()
        self._drawn = len(lines)
        self._last_draw = self._clock()
        self._dirty = False

    def _erase(self) -> None:
        if self._live and self._drawn:
            self._stream.write(f"\x1b[{self._drawn}A\x1b[J")
            self._drawn = 0

    def _plain_pending(self) -> bool:
        return self.board.plain() != self._plain_said

    def _print_plain(self) -> None:
        text = self.board.plain()
        self._stream.write(f"tflaunch: {text}\n")
        self._plain_said = text
        self._last_plain = self._clock()
