"""Keras 3 (TF_USE_LEGACY_KERAS=0) under MultiWorkerMirroredStrategy: `--fit` trains with
Model.fit, otherwise a custom loop with strategy.run; prints a hash of the weights, which
the workers of a synchronized group share."""

import hashlib
import sys

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
import keras  # noqa: E402  (after the strategy, like every TensorFlow call)

print(f"keras {keras.__version__}, tf.keras is {tf.keras.Model.__module__}", flush=True)
rng = np.random.default_rng(0)
x = rng.random((256, 8)).astype("float32")
y = (x.sum(axis=1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    optimizer = keras.optimizers.SGD(0.1)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

if "--fit" in sys.argv:
    model.compile(optimizer=optimizer, loss=loss_fn)
    model.fit(dataset, epochs=1, steps_per_epoch=4, verbose=2)
else:
    batches = iter(strategy.experimental_distribute_dataset(dataset))

    @tf.function
    def train_step(iterator):
        def step(features, labels):
            with tf.GradientTape() as tape:
                per_example = loss_fn(labels, model(features, training=True))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=32)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.reduce("SUM", strategy.run(step, args=next(iterator)), axis=None)

    for _ in range(4):
        loss = train_step(batches)
    print(f"custom loop loss {float(loss):.4f}", flush=True)
digest = hashlib.sha256(b"".join(w.numpy().tobytes() for w in model.weights)).hexdigest()
print(f"weights sha256 {digest}", flush=True)
