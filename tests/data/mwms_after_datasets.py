"""TensorFlow's distribute/keras.ipynb ported to MultiWorkerMirroredStrategy as the warning
about MirroredStrategy says, but in the tutorial's order: the datasets are built first, so
TensorFlow has started before the strategy can configure its collective ops."""

import numpy as np
import tensorflow as tf

images = np.random.default_rng(0).random((64, 8)).astype("float32")
train_dataset = tf.data.Dataset.from_tensor_slices(images).batch(16)
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # too late: tf.data came first
print("strategy created", flush=True)
