"""Log lines that say which worker wrote them: all pods' logs end up side by side.

The format is the contract's (`TRAINER_LOG_FORMAT`): `tflaunch local` reads the trainer's
last ERROR line from it to say why a worker failed.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import IO

from launcher.core import contract

TENSORFLOW_LOGGERS = ("tensorflow", "absl")
"""TensorFlow's Python loggers: "tensorflow", and "absl", which tf.train.Checkpoint uses
for "Sharding callback duration: 16 microseconds" at every save."""


class _Output:
    """The worker's stdout and stderr as one reader sees them (a pod's log, `tflaunch
    local`'s pipe): the program's output passes through unchanged, and a record of ours
    always starts on its own line, even after a line the program left open (Keras' progress
    bar ends an unfinished epoch with `\b\b\b`, no newline); else the launcher could not
    tell the record from the program's output."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # a signal handler may log while the main thread does
        self.mid_line = False
        self._last_sink: IO[bytes] | None = None

    def passthrough(self, sink: IO[bytes], chunk: bytes) -> None:
        """Pass `chunk` of the program's output on; when the program's other stream left a
        line open (a progress bar on stdout, then TensorFlow's C++ error on stderr), end
        that line first, so that the next one starts where a reader expects it."""
        with self.lock:
            try:
                if self.mid_line and self._last_sink not in (None, sink):
                    assert self._last_sink is not None
                    self._last_sink.write(b"\n")
                    self._last_sink.flush()
                sink.write(chunk)
                sink.flush()
            except (OSError, ValueError):
                return
            self._last_sink = sink
            self.mid_line = not chunk.endswith(b"\n")


OUTPUT = _Output()


class _OwnLineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    def emit(self, record: logging.LogRecord) -> None:
        with OUTPUT.lock:
            if OUTPUT.mid_line:
                self.stream.write("\n")
                OUTPUT.mid_line = False
            super().emit(record)


def configure(label: str, debug: bool = False) -> None:
    """Send INFO and up to stderr as `time [worker i/n] LEVEL message`.

    TensorFlow's Python INFO lines ("Collective all_reduce tensors: ...", one per traced
    function; the sharding line after every epoch's backup) bury the epoch lines: they
    show only with `debug` ($TFLAUNCH_LOG_LEVEL=debug); its warnings and errors always do.
    """
    logging.basicConfig(
        level=logging.INFO,
        format=contract.TRAINER_LOG_FORMAT.format(label=label),
        datefmt=contract.TRAINER_LOG_DATE_FORMAT,
        handlers=[_OwnLineHandler(sys.stderr)],
        force=True,
    )
    for name in TENSORFLOW_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if debug else logging.WARNING)
