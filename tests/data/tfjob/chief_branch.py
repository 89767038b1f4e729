"""A program written for a TFJob with a Chief: it branches on TF_CONFIG's task.type, as
training-operator's users do. Every member trains in one MultiWorkerMirroredStrategy group and
saves (each must take part in the save); the chief into the model directory, a worker into a
throwaway one. It prints what TensorFlow itself made of TF_CONFIG."""

import hashlib
import json
import os
import tempfile

import numpy as np
import tensorflow as tf

config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
print("TF_CONFIG " + json.dumps(config, sort_keys=True), flush=True)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
resolver = strategy.cluster_resolver
print(
    f"tensorflow: task {resolver.task_type} {resolver.task_id}, "
    f"{strategy.num_replicas_in_sync} replicas, should_checkpoint "
    f"{strategy.extended.should_checkpoint}",
    flush=True,
)
x = np.random.default_rng(0).random((256, 8)).astype("float32")
y = (x.sum(axis=1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.Input((8,)),
            tf.keras.layers.Dense(8, activation="relu"),
            tf.keras.layers.Dense(2),
        ]
    )
    model.compile(
        optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
model.fit(dataset, epochs=1, steps_per_epoch=4, verbose=0)
is_chief = task["type"] == "chief"
directory = os.environ["TFLAUNCH_MODEL_DIR"] if is_chief else tempfile.mkdtemp()
model.save(os.path.join(directory, "model.keras"))
digest = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
print(f"{task['type']} {task['index']} weights sha256 {digest}", flush=True)
if is_chief:
    print(f"chief saved {os.path.join(directory, 'model.keras')}", flush=True)
