"""Multi-worker training with Keras, the way TensorFlow's tutorial writes it.

This is https://www.tensorflow.org/tutorials/distribute/multi_worker_with_keras as a user
would adapt it, with the two lines tflaunch asks for: the backup directory and the model
directory come from the environment ($TFLAUNCH_CHECKPOINT_DIR, $TFLAUNCH_MODEL_DIR).
Everything else is plain TensorFlow: MultiWorkerMirroredStrategy reads TF_CONFIG, which
tflaunch sets in every worker.

    tflaunch local --script examples/custom/keras_mnist.py --workers 2
    tflaunch local examples/custom/keras-mnist.yaml
    tflaunch submit examples/custom/keras-mnist.yaml        # the same, on a cluster

Data: --data PATH (an mnist.npz, e.g. the trainer image's $TFLAUNCH_DATA); without it,
MNIST-shaped images of 10 learnable patterns are generated here, so it runs offline.
"""

import argparse
import hashlib
import json
import os
import tempfile

import numpy as np
import tensorflow as tf


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--per-worker-batch-size", type=int, default=64)
    parser.add_argument("--data", help="an mnist.npz; default: generated images")
    return parser.parse_args()


def load_images(path):
    """(x, y): MNIST from `path`, or 6,000 generated 28x28 images of 10 patterns."""
    if path:
        with np.load(path) as mnist:
            return mnist["x_train"], mnist["y_train"]
    rng = np.random.default_rng(0)  # the same images on every worker
    templates = rng.uniform(0, 255, size=(10, 28, 28))
    y = rng.integers(0, 10, size=6000)
    x = np.clip(templates[y] + rng.normal(0, 60, size=(6000, 28, 28)), 0, 255)
    return x.astype(np.uint8), y.astype(np.int64)


def mnist_dataset(batch_size, path):
    x_train, y_train = load_images(path)
    # The `x` arrays are in uint8 and have values in the [0, 255] range.
    # You need to convert them to float32 with values in the [0, 1] range.
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    train_dataset = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .shuffle(60000, seed=1)
        .repeat()
        .batch(batch_size)
    )
    return train_dataset


def build_and_compile_cnn_model():
    model = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(28, 28)),
            tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
        metrics=["accuracy"],
    )
    return model


def write_filepath(filepath, task_type, task_id):
    """The chief saves to `filepath`; the other workers to a throwaway directory."""
    if task_type == "worker" and task_id != 0:  # not the chief
        return os.path.join(tempfile.mkdtemp(), os.path.basename(filepath))
    return filepath


def weights_hash(model):
    """Equal on every worker: MWMS keeps the replicas' variables in sync."""
    return hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()


def main():
    args = parse_args()
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    num_workers = len(tf_config.get("cluster", {}).get("worker", [])) or 1
    task = tf_config.get("task", {"type": "worker", "index": 0})

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    print(f"replicas in sync: {strategy.num_replicas_in_sync}", flush=True)
    global_batch_size = args.per_worker_batch_size * num_workers
    multi_worker_dataset = mnist_dataset(global_batch_size, args.data)

    with strategy.scope():
        # Model building/compiling need to be within `strategy.scope()`.
        multi_worker_model = build_and_compile_cnn_model()

    # BackupAndRestore: a worker group that tflaunch restarts resumes at the last epoch.
    backup_dir = os.path.join(os.environ.get("TFLAUNCH_CHECKPOINT_DIR", "/tmp"), "backup")
    callbacks = [tf.keras.callbacks.BackupAndRestore(backup_dir=backup_dir)]
    multi_worker_model.fit(
        multi_worker_dataset,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        callbacks=callbacks,
        verbose=2,
    )

    model_dir = os.environ.get("TFLAUNCH_MODEL_DIR", "/tmp/keras-mnist")
    path = write_filepath(os.path.join(model_dir, "model.keras"), task["type"], task["index"])
    multi_worker_model.save(path)  # every worker saves: saving may run collectives
    print(f"weights sha256 {weights_hash(multi_worker_model)}", flush=True)


if __name__ == "__main__":
    main()
