"""A two-file MWMS program in the layout of TensorFlow's multi-worker tutorials: this file
imports its neighbour module and trains with Keras' default progress bar (verbose=1).

`--kill-worker I --kill-at EPOCH STEP` makes worker I's program SIGKILL itself in the first
attempt, mid-epoch, while its progress bar is left without a newline (a test's fault)."""

import argparse
import json
import os
import signal

import mnist_setup
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps-per-epoch", type=int, default=20)
parser.add_argument("--kill-worker", type=int)
parser.add_argument("--kill-at", type=int, nargs=2, metavar=("EPOCH", "STEP"))
args = parser.parse_args()

tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
print(f"replicas in sync: {strategy.num_replicas_in_sync}", flush=True)

dataset = mnist_setup.mnist_like_dataset(global_batch_size=32 * num_workers)
with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    model = mnist_setup.build_and_compile_model()


class KillMidEpoch(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch + 1

    def on_train_batch_end(self, batch, logs=None):
        if [self.epoch, batch + 1] == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


callbacks = []
first_attempt = os.environ.get("TFLAUNCH_RESTARTS") == "0"
if first_attempt and args.kill_worker == tf_config["task"]["index"] and args.kill_at:
    callbacks.append(KillMidEpoch())
model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks)
