"""The chief's curves.png, drawn by a process of its own beside training.

`CurvesProcess` starts `python -m trainer.curves_process MODEL_DIR LABEL LOG_LABEL` when the
chief starts training. That process lowers its priority, imports matplotlib and renders a
small figure (font cache, Agg: ~0.6 s of CPU, taken from what training leaves idle), then
waits for result.json's content on stdin. The chief sends it once the result is known,
before exporting the model, and the drawing (~0.1 s) runs on the other core meanwhile: in
the chief's own process it took ~0.6 s more of the export's wall time (the GIL, and
matplotlib's first use), docs/performance.md.

Without a result (training failed, the trainer exited) the process reads end-of-file and
exits without drawing. A picture is never worth failing a finished run: without
matplotlib, or when drawing fails, one warning says so and the run still succeeds.

TensorFlow is never imported here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from launcher.core import curves
from trainer import logs

log = logging.getLogger(__name__)

CURVES_FILE = "curves.png"
NICENESS = 10
"""Below training: the warm-up takes the cores' idle time, not the workers'."""
WAIT_SECONDS = 120.0


def write_curves(result: Mapping[str, Any], model_dir: str, label: str) -> str | None:
    """Draw result.json's curves into `model_dir/curves.png`; the path, or None (warned)."""
    path = os.path.join(model_dir, CURVES_FILE)
    try:
        curves.draw([curves.curves_of(result, label)], path)
    except curves.PlotUnavailable:
        log.warning("no %s: matplotlib is not installed (%s)", CURVES_FILE, curves.INSTALL_HINT)
        return None
    except Exception as e:
        log.warning("no %s: drawing failed (%s: %s)", CURVES_FILE, type(e).__name__, e)
        return None
    log.info("curves: %s", path)
    return path


class CurvesProcess:
    """The drawing process, from the start of training to `wait`."""

    def __init__(self, model_dir: str, label: str, log_label: str) -> None:
        self._path = os.path.join(model_dir, CURVES_FILE)
        self._process: subprocess.Popen[bytes] | None = None
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", __name__, model_dir, label, log_label],
                stdin=subprocess.PIPE,
            )
        except OSError as e:
            log.warning("no %s: cannot start its process (%s)", CURVES_FILE, e)

    def start(self, result: Mapping[str, Any]) -> None:
        """Hand the result over (as it is now: a JSON copy); the drawing begins."""
        self._send(json.dumps(result).encode())

    def _send(self, data: bytes) -> None:
        if self._process is None or self._process.stdin is None or self._process.stdin.closed:
            return
        try:
            self._process.stdin.write(data)
            self._process.stdin.close()
        except OSError as e:  # the process died (e.g. killed); the run does not
            log.warning("no %s: its process is gone (%s)", CURVES_FILE, e)

    def wait(self) -> str | None:
        """The drawing's path once it is written (None: not drawn)."""
        if self._process is None:
            return None
        self._send(b"")  # not started: end-of-file, the process exits without drawing
        try:
            code = self._process.wait(WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self._process.kill()
            log.warning("no %s: drawing took over %gs", CURVES_FILE, WAIT_SECONDS)
            return None
        return self._path if code == 0 and os.path.exists(self._path) else None

    def abandon(self) -> None:
        """The run failed: nothing to draw, and nobody waits for a warm-up to finish."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()


def serve(model_dir: str, label: str, source: IO[bytes]) -> str | None:
    """Warm matplotlib up, then draw the result read from `source` (nothing on EOF)."""
    with contextlib.suppress(OSError):  # a lower priority is a courtesy, not a need
        os.nice(NICENESS)
    with contextlib.suppress(Exception):  # write_curves says why, once there is a result
        curves.warm_up()
    data = source.read()
    if not data:
        return None
    return write_curves(json.loads(data), model_dir, label)


def main(argv: Sequence[str] | None = None) -> int:
    model_dir, label, log_label = list(sys.argv[1:] if argv is None else argv)
    logs.configure(log_label)
    return 0 if serve(model_dir, label, sys.stdin.buffer) else 1


if __name__ == "__main__":
    sys.exit(main())
