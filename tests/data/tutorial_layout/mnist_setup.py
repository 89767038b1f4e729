"""The dataset and the model of a two-file MultiWorkerMirroredStrategy program, laid out as
TensorFlow's multi-worker tutorials are (main.py imports this module). MNIST-shaped
synthetic data made here, so that nothing is downloaded."""

import numpy as np
import tensorflow as tf


def mnist_like_dataset(global_batch_size: int, examples: int = 2048) -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, size=examples)
    images = rng.normal(size=(examples, 28, 28)).astype("float32") + labels[:, None, None] / 5
    dataset = tf.data.Dataset.from_tensor_slices((images, labels.astype("int64")))
    return dataset.repeat().batch(global_batch_size)


def build_and_compile_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(28, 28)),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.01),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model
