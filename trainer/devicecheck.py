"""`python -m trainer.devicecheck N LABEL`: exit 78 unless TensorFlow sees N GPUs.

The worker wrapper runs this as a short-lived child, so that the wrapper itself never
imports TensorFlow (nor holds a CUDA context for the whole run); the message is the
built-in trainer's (`preflight.check_devices`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from launcher.core import contract
from trainer import logs, preflight
from trainer.errors import ConfigError


def main(argv: Sequence[str]) -> int:
    expect_gpus, label = int(argv[0]), argv[1]
    logs.configure(label, contract.debug_requested(os.environ))
    preflight.prepare_environment(os.environ, expect_gpus, contract.debug_requested(os.environ))
    try:
        preflight.check_devices(expect_gpus, label)
    except ConfigError as e:
        preflight.log.error("%s", e)
        return e.exit_code
    return contract.EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
