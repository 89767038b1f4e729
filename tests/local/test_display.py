"""The `tflaunch local` console without TensorFlow: worker states read from the trainer's
lines, the bar drawn from the chief's progress, notable lines kept, NO_COLOR, width, and
plain lines at most every few seconds off a terminal."""

from __future__ import annotations

import io
import re

from launcher.core import progress
from launcher.core.progress import Progress, fit
from launcher.local import board as board_lib
from launcher.local.board import Board
from launcher.local.display import SummaryConsole, make_console, no_color

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
WAITING = "12:00:01 [worker 1/2] INFO waiting up to 300s for peers 127.0.0.1:5001"
REACHABLE = "12:00:02 [worker 1/2] INFO all 1 peers reachable after 0.2s"
INFO = "12:00:03 [worker 0/2] INFO epoch 1/2: loss=0.5 accuracy=0.9 (1.0s)"
WARNING = "12:00:03 [worker 1/2] WARNING no --checkpoint-dir: backups go to /tmp/x"
ERROR = "12:00:04 [worker 1/2] ERROR training failed because a peer died"
CPP = "E0000 00:00:1796050260.220975    5641 cuda_platform.cc:52] failed call to cuInit"
MID = progress.format_line(Progress(1, 2, 12, 24, 0.51234, 3210.0, 20.0))
END = progress.format_line(Progress(2, 2, 24, 24, 0.1, 3300.0, 0.0))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def console(
    live: bool, color: bool = False, width: int = 100
) -> tuple[SummaryConsole, io.StringIO, Clock]:
    stream, clock = io.StringIO(), Clock()
    return SummaryConsole(Board("mnist", 2), stream, live=live, color=color, clock=clock,
                          width=lambda: width), stream, clock  # fmt: skip


def test_worker_states_follow_the_trainers_lines_the_progress_and_the_exits() -> None:
    board = Board("mnist", 2)
    assert board.states == ["starting", "starting"]
    board.read(1, WAITING)
    assert board.states == ["starting", "waiting for peers"]
    board.read(1, REACHABLE)
    assert board.states == ["starting", "training"]
    assert board.read(1, MID) is None, "only the chief's progress counts"
    assert board.read(0, MID) == progress.parse_line(MID)
    assert board.states == ["training", "training"]
    board.exited(0, 0)
    board.exited(1, -9)
    assert board.states == ["done", "killed by SIGKILL"]
    board.restarted(1)
    assert board.states == ["restarting", "restarting"]
    board.read(0, WAITING.replace("worker 1/2", "worker 0/2"))
    assert board.states == ["waiting for peers", "restarting"]


def test_the_bar_shows_epoch_step_loss_throughput_and_eta_within_the_width() -> None:
    board = Board("mnist", 2)
    board.read(0, MID, elapsed=65)
    head, *workers = board.lines(elapsed=65, width=200)
    assert "epoch 1/2" in head and "step 12/24" in head and "loss 0.5123" in head
    assert "3,210 img/s" in head and "ETA 20s" in head and "25%" in head and "[1m05s]" in head
    assert workers == ["  worker 0  training", "  worker 1  training"]
    narrow = board.headline(65, width=50)
    assert "step 12/24" in narrow and "ETA 20s" in narrow and len(narrow) <= 50, narrow
    for width in (20, 40, 79):
        assert all(len(line) <= width for line in board.lines(65, width)), width
    colored = board.lines(65, 40, color=True)
    assert all(len(ANSI.sub("", line)) <= 40 for line in colored)
    assert fit("\x1b[32mabcdef\x1b[0m", 4) == "\x1b[32mabc\x1b[0m…\x1b[0m"


def test_the_bar_moves_on_between_two_reports_at_the_measured_rate_marked_as_an_estimate():
    """The chief reports once per `steps_per_execution` steps (32 by default: 11 s on a
    2-core machine), and the bar stood still at 0 % that long, then jumped."""
    board = Board("mnist", 2)
    board.read(0, MID, elapsed=60)  # step 12/24 of epoch 1/2, ETA 20s: 36 steps in 20 s
    assert "step 12/24" in board.headline(60) and "ETA 20s" in board.headline(60)
    assert "step ~21/24" in board.headline(65) and "ETA 15s" in board.headline(65)
    assert "step ~23/24" in board.headline(600)  # never the epoch's end: that is reported
    assert board.plain() == "mnist: " + progress.describe(
        Progress(1, 2, 12, 24, 0.51234, 3210.0, 20.0)
    )


def test_many_workers_are_summed_up_in_one_line() -> None:
    board = Board("big", 64)
    for i in (30, 31):
        board.read(i, WAITING.replace("worker 1/2", f"worker {i}/64"))
    board.read(0, MID)  # training starts for everyone not waiting any more
    assert board.worker_lines() == ["  workers: 64 workers training"]
    board.exited(5, 1)
    (line,) = board.worker_lines()
    assert line == "  workers: 63 training, 1 exited 1 (worker 5)"
    assert len(Board("few", board_lib.ONE_LINE_PER_WORKER).worker_lines()) == 8


def test_live_redraws_in_place_and_keeps_warnings_errors_and_epochs_above() -> None:
    live, stream, clock = console(live=True)
    for line in (WAITING, INFO, CPP, WARNING, MID):
        clock.now += 1
        live.line(1 if "worker 1/2" in line else 0, line)
    live.line(1, ERROR)
    live.line(1, "Traceback (most recent call last):")
    live.line(1, '  File "x.py", line 1')
    clock.now += 1
    live.line(0, END)
    live.close()
    text = stream.getvalue()
    assert "\x1b[3A\x1b[J" in text, "the 3-line block is redrawn in place"
    permanent = [line for line in ANSI.sub("", text).splitlines() if line.startswith("[worker")]
    assert permanent == [
        f"[worker 1] {WARNING}", f"[worker 1] {ERROR}",
        "[worker 1] Traceback (most recent call last):", '[worker 1]   File "x.py", line 1',
    ]  # fmt: skip
    assert "mnist: epoch 2/2, step 24/24, loss 0.1000, 3300 images/s, ETA 0s" in text
    assert INFO not in text and "cuInit" not in text and "TFLAUNCH_PROGRESS" not in text
    assert "\x1b[32m" not in text, "no color asked for"


def test_colors_only_on_request_and_never_with_no_color() -> None:
    live, stream, _ = console(live=True, color=True)
    live.line(0, MID)
    live.close()
    assert "\x1b[32m" in stream.getvalue()
    assert no_color({"NO_COLOR": "1"}) and no_color({"TERM": "dumb"}) and not no_color({})
    assert not no_color({"NO_COLOR": ""}), "no-color.org: an empty NO_COLOR is unset"

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    made = make_console("mnist", 2, Tty(), verbose=False, env={"NO_COLOR": "1"})
    assert isinstance(made, SummaryConsole) and made._live and not made._color


def test_plain_lines_come_at_most_every_few_seconds_and_at_each_epochs_end() -> None:
    plain, stream, clock = console(live=False)
    plain.line(1, WAITING)
    for step in range(1, 24):  # a progress line every 0.5 s
        clock.now += 0.5
        plain.line(0, progress.format_line(Progress(1, 2, step, 24, 1.0, 100.0, 10.0)))
    plain.line(0, progress.format_line(Progress(1, 2, 24, 24, 0.5, 100.0, 9.0)))
    plain.close()
    lines = stream.getvalue().splitlines()
    assert "\x1b" not in stream.getvalue()
    assert lines[0] == "tflaunch: mnist: 1 starting (worker 0), 1 waiting for peers (worker 1)"
    progress_lines = [line for line in lines if "epoch 1/2" in line]
    # Progress every 0.5 s for 11.5 s: printed at 5 s, 10 s and at the epoch's end.
    assert [line.split(",")[1] for line in progress_lines] == [
        " step 10/24", " step 20/24", " step 24/24",
    ], lines  # fmt: skip
    assert progress_lines[-1].startswith("tflaunch: mnist: epoch 1/2, step 24/24")


def test_a_plain_status_line_comes_before_the_worker_lines_that_followed_it() -> None:
    """A failed start printed both tracebacks, then "2 workers training", which had been
    true before them (the state line waits its turn; a worker's error does not)."""
    plain, stream, clock = console(live=False)
    plain.line(0, WAITING.replace("worker 1/2", "worker 0/2"))  # printed: the first state
    clock.now += 1
    plain.line(0, REACHABLE.replace("worker 1/2", "worker 0/2"))  # trains: not printed yet
    plain.line(0, "Traceback (most recent call last):")
    lines = stream.getvalue().splitlines()
    assert lines[-2:] == [
        "tflaunch: mnist: 1 training (worker 0), 1 starting (worker 1)",
        "[worker 0] Traceback (most recent call last):",
    ], lines


def test_verbose_shows_every_line_prefixed() -> None:
    stream = io.StringIO()
    verbose = make_console("mnist", 2, stream, verbose=True)
    for line in (CPP, INFO, MID):
        verbose.line(0, line)
    assert stream.getvalue().splitlines() == [f"[worker 0] {line}" for line in (CPP, INFO, MID)]
