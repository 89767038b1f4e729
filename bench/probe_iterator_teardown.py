"""How long freeing a tf.data iterator takes after it has run a while: one process, no MWMS.

An iterator whose dataset is autotuned runs a background thread (`Model::OptimizeLoop`) that
sleeps between optimizations for a period doubling from 10 ms up to 60 s. Freeing the
iterator cancels that thread and waits for it. TensorFlow's `CancellationManager` runs the
cancellation callbacks (which wake the thread) before it marks itself cancelled, so the
woken thread can read "not cancelled" and sleep out the rest of its period: the seconds a
worker loses when Keras' `fit` returns (docs/own-training.md, "Seconds lost when `fit`
returns"). This probe shows it without Keras or a second worker: per case, `--runs`
iterators each read for `--seconds`, then freed, the free timed.

* autotune: `map(num_parallel_calls=AUTOTUNE)` and `prefetch(AUTOTUNE)`, TensorFlow's
  defaults (autotuning on), as in TensorFlow's tutorials;
* autotune-off: the same with `options.autotune.enabled = False` (fixed parallelism 2 and
  buffer 2).

Usage: .venv/bin/python bench/probe_iterator_teardown.py [--runs 8] [--seconds 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

STALL_SECONDS = 0.5
"""A free longer than this waited for the thread (the others take milliseconds)."""


def make_dataset(autotune: bool) -> Any:
    """An endless pipeline with a parallel map and a prefetch, autotuned or not."""
    import tensorflow as tf

    parallel = tf.data.AUTOTUNE if autotune else 2
    dataset = (
        tf.data.Dataset.range(1 << 40)
        .map(lambda x: x * 2, num_parallel_calls=parallel)
        .batch(64)
        .prefetch(parallel)
    )
    options = tf.data.Options()
    options.autotune.enabled = autotune
    return dataset.with_options(options)


def free_seconds(autotune: bool, seconds: float) -> float:
    """Read a new iterator for `seconds`, then the time it takes to free it."""
    iterator = iter(make_dataset(autotune))
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        next(iterator)
    freeing = time.monotonic()
    del iterator  # the eager iterator's resource is deleted here, synchronously
    return time.monotonic() - freeing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    results: dict[str, list[float]] = {"autotune": [], "autotune-off": []}
    for _ in range(args.runs):  # alternating, so that load affects both alike
        for case in results:
            results[case].append(free_seconds(case == "autotune", args.seconds))
    print(f"TensorFlow {tf.__version__}; each iterator read for {args.seconds:g} s, then freed")
    for case, times in results.items():
        stalls = [t for t in times if t > STALL_SECONDS]
        print(
            f"{case:13} frees over {STALL_SECONDS} s: {len(stalls)} of {len(times)}; "
            f"median {statistics.median(times):.3f} s, max {max(times):.3f} s"
        )
    print(json.dumps({case: [round(t, 3) for t in times] for case, times in results.items()}))


if __name__ == "__main__":
    main()
