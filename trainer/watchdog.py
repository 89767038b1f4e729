"""Exit when training stops making progress, so a hung group is restarted.

TensorFlow's coordination service notices a peer that died or froze (its heartbeats
stop) and aborts the collectives within ~10-20 s. It cannot notice a peer that is alive
but stuck outside TensorFlow (a deadlocked input pipeline, a hung NFS read): its
heartbeats go on while everyone else waits in an all-reduce forever. This thread is the
last line: no step finished for `timeout` seconds -> log why and exit the process.

A program frozen whole (SIGSTOP, a hang that holds the GIL) stops this thread too, in any
phase. So every second it also writes `frozen_after` (the stall timeout) to `alive_file`
($TFLAUNCH_ALIVE_FILE, set by the worker wrapper), and the wrapper stops a program whose
file is older than that (`frozen_for`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from launcher.core import contract

log = logging.getLogger(__name__)


class Watchdog:
    """A background thread that exits the process when `beat()` stops being called."""

    def __init__(
        self,
        exit_fn: Callable[[int], object] = os._exit,
        clock: Callable[[], float] = time.monotonic,
        poll_seconds: float = 1.0,
        alive_file: str | None = None,
        frozen_after: float = 0.0,
    ) -> None:
        self._exit_fn = exit_fn
        self._clock = clock
        self._poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._last_beat = clock()
        self._phase: str | None = None
        self._timeout = 0.0
        self._exit_code = contract.EXIT_TRANSIENT
        self._stop = threading.Event()
        self._alive_file = alive_file
        self._frozen_after = frozen_after
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self._thread.start()

    def arm(self, phase: str, timeout: float, exit_code: int = contract.EXIT_TRANSIENT) -> None:
        """Watch `phase`: exit with `exit_code` after `timeout` s without a beat (0 = off)."""
        with self._lock:
            self._phase, self._timeout, self._exit_code = phase, timeout, exit_code
            self._last_beat = self._clock()

    def beat(self) -> None:
        """Record progress (a step, an epoch boundary)."""
        with self._lock:
            self._last_beat = self._clock()

    def disarm(self) -> None:
        with self._lock:
            self._phase = None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _expired(self) -> tuple[str, float, int] | None:
        with self._lock:
            if self._phase is None or not self._timeout:
                return None
            if self._clock() - self._last_beat < self._timeout:
                return None
            return self._phase, self._timeout, self._exit_code

    def _still_alive(self) -> None:
        if not self._alive_file:
            return
        with contextlib.suppress(OSError):  # the wrapper's check is a bonus, never a failure
            Path(self._alive_file).write_text(f"{self._frozen_after:g}\n", encoding="ascii")

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_seconds):
            self._still_alive()
            expired = self._expired()
            if expired is None:
                continue
            phase, timeout, exit_code = expired
            log.error(
                "no progress in %s for %gs: a peer is probably dead or stuck; exiting "
                "(code %d) so that the group is restarted from the last checkpoint",
                phase,
                timeout,
                exit_code,
            )
            for handler in logging.getLogger().handlers:
                handler.flush()
            sys.stdout.flush()
            self._exit_fn(exit_code)
            return


def frozen_for(alive_file: str, now: Callable[[], float] = time.time) -> float | None:
    """The `frozen_after` of the watchdog writing `alive_file` when it has not written it
    for that long (the program froze); None while it runs, without one, or never wrote."""
    try:
        text = Path(alive_file).read_text(encoding="ascii")
        age = now() - os.stat(alive_file).st_mtime
    except OSError:
        return None
    try:
        timeout = float(text)
    except ValueError:  # read while it was written
        return None
    return timeout if 0 < timeout <= age else None
