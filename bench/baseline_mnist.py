"""The textbook Keras MNIST example under MultiWorkerMirroredStrategy, untuned.

The yardstick for `bench_local.py`, the example tflaunch grew from: TF_CONFIG set by hand,
`MultiWorkerMirroredStrategy()`, the trainer's model and optimizer, written the way the
Keras/TensorFlow multi-worker tutorial writes it (shuffle(10000), batch(per-worker batch x
workers), prefetch, `fit` with default settings: no steps_per_execution), with no thread,
step or pipeline tuning. The tutorial's batch is 64 per worker (`--per-worker-batch 64`,
the default); `--per-worker-batch 128` gives the trainer's global batch of 256 on 2 workers.
Run one process per worker with TF_CONFIG set, like the trainer.

Usage: TF_CONFIG=... python bench/baseline_mnist.py --data mnist.npz --epochs 3
       [--per-worker-batch 64] [--train-examples 8000]
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

PER_WORKER_BATCH = 64
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
    parser.add_argument("--per-worker-batch", type=int, default=PER_WORKER_BATCH)
    parser.add_argument("--train-examples", type=int, help="the first N training images")
    args = parser.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = args.per_worker_batch * strategy.num_replicas_in_sync
    (x_train, y_train), (x_test, y_test) = load(args.data)
    x_train, y_train = x_train[: args.train_examples], y_train[: args.train_examples]
    train = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .shuffle(10000)
        .batch(global_batch)
        .prefetch(tf.data.AUTOTUNE)
    )
    test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(global_batch)
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
            "test_examples": len(y_test),
            "global_batch_size": global_batch,
            "fit_seconds": round(fit_seconds, 3),
            "images_per_sec": round(args.epochs * len(y_train) / fit_seconds, 1),
            "epochs": args.epochs,
        }
        print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
