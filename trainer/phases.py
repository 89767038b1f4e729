"""Where a worker's time went, measured by the trainer itself: result.json's `phases`.

Seconds per phase, disjoint, in the order they happen:

* `import`: importing TensorFlow, tf-keras and the trainer's modules that use them, and
  listing the devices.
* `strategy`: MultiWorkerMirroredStrategy's start (gRPC server, coordination service, peers).
* `setup`: the model built and compiled under the scope, the datasets, the callbacks.
* `first_step`: `fit` called -> the first execution's end (fit's set-up, the restore,
  tracing, graph optimization and the first `steps_per_execution` steps).
* `fit`: the first execution's end -> the last one's, less the epoch-end evaluations.
* `fit_end`: the last execution's end -> `fit` returned, less the last epoch's evaluation:
  the epoch-end callbacks, `on_train_end` (the backup's removal, the preemption handler's
  threads) and what tf-keras frees when fit returns. Normally a fraction of a second; a stall
  here is the "~5 s at the end of fit" of issue 26: `make bench-compare` counts them.
* `evaluate`: every test evaluation (each epoch's end, and a final one if it ran).
* `export`: the SavedModel written (every worker takes part).
* `total`: the trainer's modules loaded -> the result ready. It is at least the sum of the
  phases above; the rest is reading the data, the rendezvous and the logs.

This module imports no TensorFlow (trainer.main imports it first, to start the clock).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from launcher.core import contract

STARTED = time.monotonic()
"""When the trainer's modules were loaded: `total` counts from here."""

ORDER = contract.RESULT_PHASES
"""The disjoint phases, in the order they happen; result.json adds `total`."""


class Phases:
    """Seconds per phase, added up as they are measured (a phase may be measured in parts).

    Args:
        clock: for tests; monotonic seconds.
        started: when `total` starts counting.
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, started: float = STARTED
    ) -> None:
        self._clock = clock
        self._started = started
        self._seconds: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        """Count `seconds` (never below 0) into phase `name`, one of ORDER."""
        if name not in ORDER:
            raise ValueError(f"unknown phase {name!r}; phases are {', '.join(ORDER)}")
        self._seconds[name] = self._seconds.get(name, 0.0) + max(0.0, seconds)

    @contextlib.contextmanager
    def measure(self, name: str) -> Iterator[None]:
        """Count the time spent in the `with` block into phase `name`."""
        started = self._clock()
        try:
            yield
        finally:
            self.add(name, self._clock() - started)

    def now(self) -> float:
        return self._clock()

    def as_dict(self) -> dict[str, float]:
        """result.json's `phases`: the measured phases in ORDER, then `total`, in seconds."""
        phases = {name: round(self._seconds[name], 3) for name in ORDER if name in self._seconds}
        phases["total"] = round(self._clock() - self._started, 3)
        return phases


def describe(phases: dict[str, float]) -> str:
    """One line for logs and `tflaunch local --verbose`: `import 5.1s, strategy 0.9s, ...`."""
    return ", ".join(f"{name} {seconds:.1f}s" for name, seconds in phases.items())
