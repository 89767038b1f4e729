"""Log lines that say which worker wrote them: all pods' logs end up side by side.

The format is the contract's (`TRAINER_LOG_FORMAT`): `tflaunch local` reads the trainer's
last ERROR line from it to say why a worker failed.
"""

from __future__ import annotations

import logging
import sys

from launcher.core import contract

TENSORFLOW_LOGGERS = ("tensorflow", "absl")
"""TensorFlow's Python loggers: "tensorflow", and "absl", which tf.train.Checkpoint uses
for "Sharding callback duration: 16 microseconds" at every save."""


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
        stream=sys.stderr,
        force=True,
    )
    for name in TENSORFLOW_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if debug else logging.WARNING)
