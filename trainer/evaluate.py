"""Test loss and accuracy over every test example, each counted exactly once.

Under MultiWorkerMirroredStrategy every evaluation step ends in an all-reduce that every
worker must join, so every worker must run the same number of steps. How we get there:
* The test set is padded to whole global batches and carries a mask (1 = real example,
  0 = padding); each replica sums (loss, correct, count) over its unmasked examples and
  the sums are all-reduced, so every worker ends with the same, exact totals. The summed
  count equals the test-set size only if every example was seen exactly once: it goes
  into result.json as `test_examples`.
* Why not a final partial batch: tf.distribute cuts a short global batch into uneven
  per-replica slices, down to empty ones (measured, 2 workers, batch 64, 449 examples:
  the last step gave worker 0 one example and worker 1 none). The step counts stay equal,
  but the last step has other shapes than the rest and than the peer's, i.e. a retrace
  and an empty-batch edge case on one worker only; padding keeps every step identical.
* Why not the chief alone: Keras' metrics are SyncOnRead variables created under the
  strategy scope; reading them is a collective that the other workers would never join.
  And one worker would do all the work.
* Why not Keras' `evaluate` with the mask as sample weight: "accuracy" is weighted only
  when declared in `weighted_metrics`, and the reported loss is averaged over the padded
  batch, padding included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from trainer import model as model_lib


@dataclasses.dataclass(frozen=True)
class Scores:
    """Mean loss and accuracy over `examples` test examples (the same on every worker)."""

    loss: float
    accuracy: float
    examples: int


# Straight-line TensorFlow: nothing for AutoGraph to convert, and converting it cost ~30 ms of
# each worker's start-up (likewise model.per_example_loss and data's per-batch cast).
@tf.autograph.experimental.do_not_convert  # type: ignore[untyped-decorator]
def replica_sums(model: Any, images: tf.Tensor, labels: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """[sum of losses, correct predictions, examples] over the unmasked examples."""
    logits = model(images, training=False)
    losses = model_lib.per_example_loss(labels, logits)
    correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1), labels), tf.float32)
    return tf.stack(
        [tf.reduce_sum(losses * mask), tf.reduce_sum(correct * mask), tf.reduce_sum(mask)]
    )


STEPS_PER_CALL = 32
"""Evaluation steps per call of the traced function (a loop inside it): one host round trip
per 32 steps instead of per step, like `--steps-per-execution` in training. The watchdog
hears from the evaluation after every call."""


def make_step(strategy: tf.distribute.Strategy, model: Any) -> Callable[[Any, Any], tf.Tensor]:
    """`steps` global batches in one call: per-replica sums, all-reduced at each step into
    the same totals on every worker, added up in float64 inside the function."""

    def step(iterator: Any, steps: Any) -> tf.Tensor:
        totals = tf.zeros(3, tf.float64)
        for _ in tf.range(steps):
            images, labels, mask = next(iterator)
            per_replica = strategy.run(replica_sums, args=(model, images, labels, mask))
            reduced = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
            totals += tf.cast(reduced, tf.float64)
        return totals

    compiled: Callable[[Any, Any], tf.Tensor] = tf.function(step)
    return compiled


def evaluate(
    strategy: tf.distribute.Strategy,
    model: Any,
    dataset: Any,
    steps: int,
    on_step: Callable[[], None] = lambda: None,
    step: Callable[[Any, Any], tf.Tensor] | None = None,
) -> Scores:
    """Run `steps` steps of `dataset` (from `data.eval_dataset`, distributed or not).

    Every worker must call this with the same `steps`: each step is a collective. `step`:
    one from `make_step`, reused across calls (each epoch's evaluation) to trace it once.
    `on_step` is called after every `STEPS_PER_CALL` steps and after the last.
    """
    step = step or make_step(strategy, model)
    iterator = iter(dataset)
    totals = np.zeros(3, np.float64)
    for first in range(0, steps, STEPS_PER_CALL):
        count = min(STEPS_PER_CALL, steps - first)
        totals += step(iterator, tf.constant(count, tf.int32)).numpy()
        on_step()
    loss_sum, correct, examples = totals
    return Scores(
        loss=float(loss_sum / examples), accuracy=float(correct / examples), examples=int(examples)
    )
