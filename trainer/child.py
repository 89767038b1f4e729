"""The user's program as the wrapper's child (`trainer.run`): its own process group, its
output passed through and remembered, stopped and reaped."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import IO

from launcher.core import contract
from trainer import logs
from trainer.errors import ConfigError
from trainer.watchdog import Watchdog

STOP_GRACE_SECONDS = 20.0
"""How long a stalled program gets between SIGTERM and SIGKILL."""
RECENT_LINES = 40
"""The program's last lines kept to find its exception line (`contract.exception_line`)."""
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the wrapper dies, so no program outlives
    a wrapper that was itself SIGKILLed (Linux; elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


class ChildProgram:
    """The user's program as a child in its own process group, its output passed through.

    Every chunk of output is a heartbeat for the stall watchdog; the last line that is not
    TensorFlow's C++ logging is kept, to say why the program failed.
    """

    def __init__(
        self, command: Sequence[str], env: Mapping[str, str], watchdog: Watchdog,
        process: subprocess.Popen[bytes] | None = None,
    ) -> None:  # fmt: skip
        """Start `command`, or adopt `process`: one started earlier with piped output (a
        warm standby, `trainer.standby`) that now runs it."""
        self._watchdog = watchdog
        self.env = dict(env)
        self.forwarded: set[int] = set()
        """The signals the wrapper passed on to the program (`_on_signal`)."""
        self.last_line = ""
        self._recent: collections.deque[str] = collections.deque(maxlen=RECENT_LINES)
        self.saved_line = ""
        """The program's last "preempted: every worker saved at step N" line, if any."""
        try:
            self.process = process or subprocess.Popen(
                list(command), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=die_with_parent,
            )  # fmt: skip
        except (FileNotFoundError, PermissionError, NotADirectoryError) as e:
            raise ConfigError(
                f"cannot start {command[0]!r}: {e.strerror}; check spec.command (and that "
                "the image has it on PATH)"
            ) from None
        assert self.process.stdout is not None and self.process.stderr is not None
        self._pumps = [
            threading.Thread(target=self._pump, args=(src, dst), daemon=True)
            for src, dst in (
                (self.process.stdout, sys.stdout.buffer),
                (self.process.stderr, sys.stderr.buffer),
            )
        ]

    def pass_output_on(self) -> None:
        """Start passing the program's output through (until then it waits in the pipes)."""
        for pump in self._pumps:
            pump.start()

    def _pump(self, source: IO[bytes], sink: IO[bytes]) -> None:
        partial = b""
        for chunk in iter(lambda: os.read(source.fileno(), 65536), b""):
            self._watchdog.beat()
            logs.OUTPUT.passthrough(sink, chunk)
            partial += chunk
            *lines, partial = partial.split(b"\n")
            self._remember(lines)
            partial = partial[-4096:]
        self._remember([partial])
        source.close()

    def _remember(self, lines: Sequence[bytes]) -> None:
        for raw in lines:
            line = contract.final_frame(raw.decode(errors="replace")).strip()
            if line and not contract.is_cpp_log_start(line):
                # A line the program logged in the trainer's format (the built-in trainer)
                # is quoted by its message only, not with a second timestamp and label.
                ours = contract.TRAINER_LOG_LINE.match(line)
                self.last_line = (ours.group("message") if ours else line)[:500]
                self._recent.append(self.last_line)
                if contract.saved_step(self.last_line) is not None:
                    self.saved_line = self.last_line

    @property
    def reason(self) -> str:
        """Why the program failed, in its own words: the exception line of its last
        traceback (not TensorFlow's `[[{{node ...}}]] [Op:...]` trailer after it), else its
        last line."""
        return contract.exception_line(list(self._recent)) or self.last_line

    def signal(self, sig: int) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, sig)

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM the program's process group; SIGKILL it after `grace` seconds."""
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.process.wait()

    def finish(self) -> int:
        """The exit status once the output is drained."""
        code = self.process.wait()
        for pump in self._pumps:
            pump.join(timeout=5.0)
        return code
