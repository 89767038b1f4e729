"""The textbook Keras MNIST example under MultiWorkerMirroredStrategy, untuned.

The yardstick for `bench_local.py`: the same model, optimizer, global batch and data as
the trainer, written the way the Keras/TensorFlow tutorials write it (shuffle(10000),
batch(256), prefetch, fit with default settings), with no thread, step or pipeline
tuning. Run one process per worker with TF_CONFIG set, like the trainer.

Usage: TF_CONFIG=... python bench/baseline_mnist.py --data mnist.npz --epochs 3
Prints one line `BASELINE_RESULT {json}` (worker 0 only).
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # tf-keras: Keras 3's fit fails under MWMS

import numpy as np
import tensorflow as tf
import tf_keras as keras

GLOBAL_BATCH = 256
RESULT_PREFIX = "BASELINE_RESULT "


def load(path: str) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    with np.load(path) as npz:
        x_train, y_train = npz["x_train"], npz["y_train"]
        x_test, y_test = npz["x_test"], npz["y_test"]
    x_train = (x_train / 255.0).astype("float32")[..., np.newaxis]
    x_test = (x_test / 255.0).astype("float32")[..., np.newaxis]
    return (x_train, y_train.astype("int64")), (x_test, y_test.astype("int64"))


def build_and_compile() -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    (x_train, y_train), (x_test, y_test) = load(args.data)
    train = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .shuffle(10000)
        .batch(GLOBAL_BATCH)
        .prefetch(tf.data.AUTOTUNE)
    )
    test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(GLOBAL_BATCH)
    with strategy.scope():
        model = build_and_compile()

    started = time.monotonic()
    model.fit(train, epochs=args.epochs, verbose=2)
    fit_seconds = time.monotonic() - started
    loss, accuracy = model.evaluate(test, verbose=0)
    if strategy.cluster_resolver.task_id in (0, None):
        result = {
            "test_accuracy": float(accuracy),
            "test_loss": float(loss),
            "fit_seconds": round(fit_seconds, 3),
            "images_per_sec": round(args.epochs * len(y_train) / fit_seconds, 1),
            "epochs": args.epochs,
        }
        print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
