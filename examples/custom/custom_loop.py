"""A custom training loop under MultiWorkerMirroredStrategy, on data that is not MNIST.

The pattern of TensorFlow's "Custom training loop with MWMS" guide: the input pipeline is
batched by the GLOBAL batch and split across replicas by `experimental_distribute_dataset`,
each replica's loss is averaged over the global batch (`tf.nn.compute_average_loss`), every
variable is created under `strategy.scope()`, and `strategy.run` runs the step on every
replica. Checkpoints go to $TFLAUNCH_CHECKPOINT_DIR through a CheckpointManager, so a
group that tflaunch restarts resumes at the last saved step.

    tflaunch local --script examples/custom/custom_loop.py --workers 2
    tflaunch local examples/custom/custom-loop.yaml

Data: 3 classes of points in 16 dimensions, generated here (the same on every worker).
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
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument("--per-replica-batch-size", type=int, default=32)
    return parser.parse_args()


def make_dataset(global_batch_size):
    """3 Gaussian blobs in 16 dimensions, batched by the global batch."""
    rng = np.random.default_rng(7)
    centers = rng.normal(0, 2, size=(3, 16))
    labels = rng.integers(0, 3, size=4096)
    features = centers[labels] + rng.normal(0, 1.5, size=(4096, 16))
    dataset = tf.data.Dataset.from_tensor_slices(
        (features.astype(np.float32), labels.astype(np.int64))
    )
    return dataset.shuffle(4096, seed=1).repeat().batch(global_batch_size)


def build_model():
    return tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(16,)),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(3),
        ]
    )


def checkpoint_dir_of(base, task_type, task_id):
    """The chief writes to `base`; the other workers to a throwaway directory (every worker
    must save: saving a distributed variable runs collectives)."""
    if task_type == "worker" and task_id != 0:
        return tempfile.mkdtemp(prefix="ckpt-")
    return base


def weights_hash(model):
    return hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()


def main():
    args = parse_args()
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch_size = args.per_replica_batch_size * strategy.num_replicas_in_sync

    dataset = make_dataset(global_batch_size)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)

    with strategy.scope():  # every variable: model, optimizer, step counter
        model = build_model()
        optimizer = tf.keras.optimizers.Adam(learning_rate=0.01)
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE
        )
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)

    base = os.path.join(os.environ.get("TFLAUNCH_CHECKPOINT_DIR", "/tmp/custom-loop"), "ckpt")
    latest = tf.train.latest_checkpoint(base)
    if latest:
        checkpoint.restore(latest)
        print(f"resumed from {os.path.basename(latest)} at step {int(step.numpy())}", flush=True)
    writable = checkpoint_dir_of(base, task.get("type", "worker"), task.get("index", 0))
    manager = tf.train.CheckpointManager(checkpoint, writable, max_to_keep=2)

    def train_step(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            per_example_loss = loss_object(labels, logits)
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def distributed_train_step(inputs):
        per_replica_losses = strategy.run(train_step, args=(inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    iterator = iter(dist_dataset)
    while step.numpy() < args.steps:
        loss = distributed_train_step(next(iterator))
        step.assign_add(1)
        if step.numpy() % args.checkpoint_every == 0:
            manager.save(checkpoint_number=step)
            print(f"step {int(step.numpy())}/{args.steps} loss {float(loss):.4f}", flush=True)
    print(f"weights sha256 {weights_hash(model)}", flush=True)


if __name__ == "__main__":
    main()
