"""The MNIST CNN, built and compiled under the strategy's scope.

Import this module only after `preflight.prepare_environment`: it imports tf-keras, and
TensorFlow must already see TF_USE_LEGACY_KERAS=1 so that `tf.keras` is tf-keras too
(Keras 3's fit fails under MultiWorkerMirroredStrategy, keras-team/keras#20585).
"""

from __future__ import annotations

import hashlib
from typing import Any

import tensorflow as tf
import tf_keras as keras

from trainer.errors import ConfigError


def require_tf_keras() -> None:
    """Fail loudly if TensorFlow was loaded with Keras 3 as `tf.keras`.

    That happens when TensorFlow was imported before TF_USE_LEGACY_KERAS=1 was set.
    """
    if not tf.keras.Model.__module__.startswith("tf_keras"):
        raise ConfigError(
            f"tf.keras is not tf-keras ({tf.keras.Model.__module__}); TensorFlow was "
            "imported before TF_USE_LEGACY_KERAS=1 was set, and Keras 3's fit fails "
            "under MultiWorkerMirroredStrategy (keras-team/keras#20585)"
        )


def build_model() -> keras.Model:
    """Conv2D(32, 3) -> MaxPooling -> Flatten -> Dense(128) -> Dense(10) logits."""
    return keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            # float32 logits under any dtype policy: softmax and loss stay exact in
            # mixed precision (a no-op under float32).
            keras.layers.Dense(10, dtype="float32"),
        ],
        name="mnist_cnn",
    )


def compile_model(
    model: keras.Model,
    learning_rate: float,
    steps_per_execution: int = 1,
    jit_compile: bool = False,
) -> None:
    """Adam on sparse categorical cross-entropy from logits, tracking accuracy.

    Must run under `strategy.scope()`: the optimizer creates its slot variables there.
    Under the mixed_float16 policy tf-keras wraps Adam in a LossScaleOptimizer itself.
    """
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
        jit_compile=jit_compile,
    )


@tf.autograph.experimental.do_not_convert  # type: ignore[untyped-decorator]  # see replica_sums
def per_example_loss(labels: Any, logits: Any) -> Any:
    """The loss `compile_model` trains on, one value per example (no reduction)."""
    return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


def weights_digest(model: keras.Model) -> str:
    """SHA-256 of every weight's bytes: equal on all workers iff they stayed in sync."""
    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(weight.tobytes())
    return digest.hexdigest()
