"""Log lines that say which worker wrote them: all pods' logs end up side by side."""

from __future__ import annotations

import logging
import sys


def configure(label: str) -> None:
    """Send INFO and up to stderr as `time [worker i/n] LEVEL message`."""
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s [{label}] %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
        force=True,
    )
    # TensorFlow's Python INFO lines ("Collective all_reduce tensors: ...", one per
    # traced function) bury the epoch lines; its warnings and errors stay.
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
