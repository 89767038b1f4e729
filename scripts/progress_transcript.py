"""Write docs/progress-bar.md: what `tflaunch local` shows on a terminal, captured from a pty.

Usage: python scripts/progress_transcript.py [--data MNIST.npz] [--out docs/progress-bar.md]

It also puts the "training" screenshot into README.md, between its progress-bar markers.

It runs the real CLI (2 CPU workers, 3 epochs) in a pseudo-terminal of 100x30, as a user
would see it (no --verbose, no NO_COLOR), records every byte it writes, and replays them
through a minimal terminal (text, \\r, \\n, cursor up, erase; colors dropped) to take
screenshots: while the workers wait for each other, in the middle of training, and at the end.
Without --data it generates a synthetic MNIST-format file (trainer.synthetic), so it works
offline. Needs pexpect (a dev dependency).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pexpect

REPO = Path(__file__).resolve().parents[1]
COLUMNS, ROWS = 100, 30
RUN_TIMEOUT_SECONDS = 600
QUIET_ENV = ("TF_CPP_MIN_LOG_LEVEL", "TFLAUNCH_LOG_LEVEL", "NO_COLOR")
README = REPO / "README.md"
README_START = "<!-- progress-bar:start (written by scripts/progress_transcript.py) -->\n"
README_END = "<!-- progress-bar:end -->"
CONTROL = re.compile(r"\x1b\[(\d*)([A-Za-z])")


class Screen:
    """Just enough of a terminal to replay `tflaunch local`: every line kept (scrollback)."""

    def __init__(self) -> None:
        self.lines: list[str] = [""]
        self.row = 0
        self.col = 0

    def feed(self, text: str) -> None:
        position = 0
        for match in CONTROL.finditer(text):
            self._text(text[position : match.start()])
            self._control(int(match.group(1) or 0), match.group(2))
            position = match.end()
        self._text(text[position:])

    def _text(self, text: str) -> None:
        for char in text:
            if char == "\n":
                self.row += 1
                self.col = 0
                if self.row == len(self.lines):
                    self.lines.append("")
            elif char == "\r":
                self.col = 0
            elif char >= " ":
                line = self.lines[self.row].ljust(self.col)
                self.lines[self.row] = line[: self.col] + char + line[self.col + 1 :]
                self.col += 1

    def _control(self, count: int, command: str) -> None:
        if command == "A":  # cursor up
            self.row = max(0, self.row - max(1, count))
        elif command == "J":  # erase from the cursor to the end of the screen
            self.lines[self.row] = self.lines[self.row][: self.col]
            del self.lines[self.row + 1 :]
        elif command == "K":
            self.lines[self.row] = "" if count == 2 else self.lines[self.row][: self.col]
        # "m" (colors) and anything else: no change to the text

    def shot(self) -> str:
        """The visible screen: the last ROWS lines, trailing blank lines dropped."""
        lines = [line.rstrip() for line in self.lines]
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines[-ROWS:])


def user_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in QUIET_ENV}
    env.update(PYTHONPATH=str(REPO), TERM="xterm-256color", COLUMNS=str(COLUMNS))
    return env


def synthetic_mnist(directory: Path) -> Path:
    path = directory / "mnist-synthetic.npz"
    child = pexpect.spawn(
        sys.executable,
        ["-m", "trainer.synthetic", str(path), "--train", "6144", "--test", "1000"],
        cwd=str(REPO), env=user_env(), encoding="utf-8", timeout=RUN_TIMEOUT_SECONDS,
    )  # fmt: skip
    child.expect(pexpect.EOF)
    child.close()
    if child.exitstatus != 0:
        sys.exit(f"progress_transcript: generating data failed:\n{child.before}")
    return path


def record(directory: Path, args: list[str]) -> dict[str, str]:
    """Run `tflaunch local ARGS` in a pty; screenshots at the moments `MOMENTS` name."""
    child = pexpect.spawn(
        sys.executable, ["-m", "launcher", "local", *args], cwd=str(directory), env=user_env(),
        encoding="utf-8", codec_errors="replace", dimensions=(ROWS, COLUMNS),
        timeout=RUN_TIMEOUT_SECONDS,
    )  # fmt: skip
    screen, shots = Screen(), {}
    while True:
        try:
            chunk = child.read_nonblocking(4096, timeout=RUN_TIMEOUT_SECONDS)
        except pexpect.EOF:
            break
        screen.feed(chunk)
        shot = screen.shot()
        for moment, seen in MOMENTS.items():
            if moment not in shots and seen(shot):
                shots[moment] = shot
    child.close()
    if child.exitstatus != 0:
        sys.exit(f"progress_transcript: the run failed:\n{screen.shot()}")
    shots["end"] = screen.shot()
    return shots


MOMENTS: dict[str, Callable[[str], bool]] = {
    "waiting": lambda shot: "waiting for peers" in shot,
    "training": lambda shot: bool(re.search(r"epoch 2/3 .* ETA \d", shot)),
}


def block(command: str, shot: str, directory: Path, data: Path) -> str:
    text = shot.replace(f"{directory}/", "").replace(str(data), data.name)
    return f"```console\n$ {command}\n{text}\n```\n"


def document(command: str, shots: dict[str, str], directory: Path, data: Path) -> str:
    def shown(moment: str) -> str:
        return block(command, shots.get(moment, "(not captured)"), directory, data)

    return f"""# The `tflaunch local` progress bar

Generated by `python scripts/progress_transcript.py` from a real run in a pseudo-terminal of
{COLUMNS}x{ROWS} (rerun it after changing the console): two CPU workers, a synthetic
MNIST-format dataset, the screen replayed from the bytes the command wrote (colors dropped).

On a terminal, `tflaunch local` draws one progress bar for the group from the chief's
`TFLAUNCH_PROGRESS` lines (epoch, step, loss, images/s, ETA, elapsed time) and a status line
per worker (starting, waiting for peers, training, restarting, done, or how it ended; more
than 8 workers are summed up in one line), redrawn in place. Above it stay the lines that
matter: one per finished epoch, any worker's warnings and errors, and tflaunch's own
messages. Off a terminal the same comes as plain lines at most every few seconds; `--verbose`
shows every line of every worker instead. Full logs: `WORKDIR/logs/worker-<i>.log`.

## While the workers find each other

{shown("waiting")}
## Training

{shown("training")}
## Done

{shown("end")}"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, help="an mnist.npz (default: synthetic)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "progress-bar.md")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tflaunch-progress-") as temporary:
        directory = Path(temporary)
        data = options.data.resolve() if options.data else synthetic_mnist(directory)
        args = ["--workers", "2", "--epochs", "3", "--global-batch-size", "64", "--data",
                str(data), "--workdir", "runs/bar", "--", "--steps-per-execution", "8"]  # fmt: skip
        shots = record(directory, args)
        command = " ".join(["tflaunch", "local", *args]).replace(str(data), data.name)
        options.out.write_text(document(command, shots, directory, data))
        readme = README.read_text()
        head, _, rest = readme.partition(README_START)
        _, _, tail = rest.partition(README_END)
        if rest:
            shot = block(command, shots.get("training", shots["end"]), directory, data)
            README.write_text(f"{head}{README_START}{shot}{README_END}{tail}")
    print(f"wrote {options.out} and the screenshot in {README.name}")


if __name__ == "__main__":
    main()
