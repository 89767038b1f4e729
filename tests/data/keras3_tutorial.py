"""TensorFlow's distribute/keras.ipynb tutorial in shape (MirroredStrategy, Model.fit, a
`.weights.h5` checkpoint per epoch, load_weights of the latest, a `.keras` save), written for
Keras 3 as the tutorial is, with a small synthetic data set in place of tfds' MNIST."""

import os
import pathlib

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
print(f"Number of devices: {strategy.num_replicas_in_sync}")

BATCH_SIZE = 32 * strategy.num_replicas_in_sync
rng = np.random.default_rng(0)
images = rng.random((256, 28, 28, 1)).astype("float32")
labels = (images.mean(axis=(1, 2, 3)) > 0.5).astype("int64")
train_dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(BATCH_SIZE)
eval_dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(BATCH_SIZE)

with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Conv2D(4, 3, activation="relu", input_shape=(28, 28, 1)),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(2),
        ]
    )
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.Adam(learning_rate=0.001),
        metrics=["accuracy"],
    )

checkpoint_dir = "./training_checkpoints"
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch:04d}.weights.h5")
callbacks = [tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix, save_weights_only=True)]
model.fit(train_dataset, epochs=2, callbacks=callbacks, verbose=2)

latest_checkpoint = sorted(pathlib.Path(checkpoint_dir).glob("*"))[-1]
model.load_weights(latest_checkpoint)
eval_loss, eval_acc = model.evaluate(eval_dataset, verbose=2)
print(f"Eval loss: {eval_loss}, Eval accuracy: {eval_acc}")
model.save("my_model.keras")
print("tutorial finished", flush=True)
