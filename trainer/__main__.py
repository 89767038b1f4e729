"""Entry point of `python -m trainer`.

Nothing here (or in what it imports at module level) may import TensorFlow: `main()`
sets TF_USE_LEGACY_KERAS=1 first. Once TF is loaded the process exits with `os._exit`:
TensorFlow's teardown can block on a dead peer, and a worker that hangs on its way out is
exactly the "one worker dies and the rest hang" failure; after a success, what is left
(e.g. fit's training iterator, kept alive by `train.KeepTrainingIterator`) is never freed.
"""

import gc
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


# TensorFlow's import and the tracing of the training step create millions of objects that live
# as long as the process. At Python's default thresholds (700, 10, 10) the collector runs ~740
# times in the demo, 5 of them over the whole heap: ~0.25 s of each worker's CPU. Training
# itself allocates little, so collecting rarely leaves the peak memory as it was (measured in
# docs/performance.md, "Time to result").
GC_THRESHOLDS = (100_000, 50, 100)

if __name__ == "__main__":
    gc.set_threshold(*GC_THRESHOLDS)
    _exit(main())
