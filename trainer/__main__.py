"""Entry point of `python -m trainer`.

Nothing here (or in what it imports at module level) may import TensorFlow: `main()`
sets TF_USE_LEGACY_KERAS=1 first. Once TF is loaded the process exits with `os._exit`:
TensorFlow's teardown can block on a dead peer, and a worker that hangs on its way out is
exactly the "one worker dies and the rest hang" failure; after a success, what is left
(e.g. fit's training iterator, kept alive by `train.KeepTrainingIterator`) is never freed.
"""

import logging
import os
import sys

from trainer.main import main


def _exit(code: int) -> None:
    if "tensorflow" in sys.modules:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    _exit(main())
