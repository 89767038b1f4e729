"""A MultiWorkerMirroredStrategy program whose chief alone saves the model: the mistake the
tests show tflaunch reading (a warning before it starts, then, when worker 1 has finished,
the chief failing in the save's collectives named as the programs diverging, not retried)."""

import json
import os

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
task_id = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
x = np.random.default_rng(0).random((256, 8)).astype("float32")
y = (x.sum(axis=1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
with strategy.scope():
    model = tf.keras.Sequential(
        [tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(2)]
    )
    model.compile(
        optimizer="sgd",
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
model.fit(dataset, epochs=1, steps_per_epoch=4, verbose=2)
if task_id == 0:  # only the chief saves: it waits in the save's collectives for worker 1
    model.save(os.path.join(os.environ["TFLAUNCH_MODEL_DIR"], "model.keras"))
print(f"worker {task_id} finished", flush=True)
