"""Preemption of a user's own Keras program through the worker wrapper (real TensorFlow).

The program uses the pattern docs/preemption.md gives (tf-keras' own save_before_preemption
does nothing off Google Cloud): SIGTERM to worker 1's wrapper is forwarded to the program,
every worker saves at the same step and exits 79, the wrapper passes 79 through and
`tflaunch local` resumes without a retry; the resumed fit trains exactly the steps left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.core import contract

pytestmark = [pytest.mark.tf, pytest.mark.slow]

PROGRAM = """
import os, sys
import numpy as np
import tensorflow as tf
from trainer import model as model_lib
from trainer.preemption import Preempted, PreemptionBackup, SigtermFlag

STEPS, EPOCHS = 60, 2
strategy = tf.distribute.MultiWorkerMirroredStrategy()
sigterm = SigtermFlag()
sigterm.install()  # after the strategy: its coordination service took SIGTERM over
with strategy.scope():
    model = model_lib.build_model()
    model_lib.compile_model(model, 1e-3, steps_per_execution=2)
rng = np.random.default_rng(0)
x = rng.random((1024, 28, 28, 1), dtype=np.float32)
y = rng.integers(0, 10, 1024)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32).with_options(options)
backup_dir = os.path.join(os.environ["TFLAUNCH_CHECKPOINT_DIR"], "backup")
try:
    model.fit(dataset, epochs=EPOCHS, steps_per_epoch=STEPS, verbose=0,
              callbacks=[PreemptionBackup(backup_dir, "epoch", sigterm, STEPS)])
except Preempted as saved:
    print(saved, flush=True)
    os._exit(79)
print("optimizer steps", int(model.optimizer.iterations.numpy()), flush=True)
"""


LOOP = """
import os, sys
import numpy as np
import tensorflow as tf
from trainer import model as model_lib

TOTAL, BATCH = 120, 32
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = model_lib.build_model()
    optimizer = tf.keras.optimizers.Adam(1e-3)
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
rng = np.random.default_rng(0)
x = rng.random((1024, 28, 28, 1), dtype=np.float32)
y = rng.integers(0, 10, 1024)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH)
iterator = iter(strategy.experimental_distribute_dataset(dataset))


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            per_example = tf.keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    strategy.run(step_fn, args=(next(iterator),))
    step.assign_add(1)  # inside the step: the save at the agreed step includes it


checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
handler = tf.distribute.experimental.PreemptionCheckpointHandler(
    strategy.cluster_resolver, checkpoint,
    os.path.join(os.environ["TFLAUNCH_CHECKPOINT_DIR"], "loop"),
    tf.distribute.experimental.TerminationConfig(exit_fn=lambda: os._exit(79), grace_period=0),
)
print("starting at step", int(step.numpy()), flush=True)
while step.numpy() < TOTAL:
    handler.run(train_step, iterator)
    if step.numpy() % 10 == 0:
        print("at step", int(step.numpy()), flush=True)
print("optimizer steps", int(optimizer.iterations.numpy()), flush=True)
"""


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _preempted_run(
    tmp_path: Path, program: str, name: str, ready: Callable[[str], bool], what: str
) -> str:
    """`tflaunch local` of `program` on two workers; SIGTERM to worker 1's wrapper once
    `ready(console text)`; the console, once the launcher has exited 0."""
    (tmp_path / "prog.py").write_text(program)
    (tmp_path / "job.yaml").write_text(
        "apiVersion: tflaunch.dev/v1alpha1\nkind: MultiWorkerJob\n"
        f"metadata: {{name: {name}}}\nspec:\n  image: tflaunch-trainer:e2e\n  workers: 2\n"
        "  script: prog.py\n  backoffLimit: 0\n"
    )
    console = tmp_path / "console.txt"
    with console.open("w") as out:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "launcher", "local", str(tmp_path / "job.yaml"),
             "--workdir", str(tmp_path / "work"), "--verbose"],
            stdout=out, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not ready(console.read_text()):
            assert launcher.poll() is None, console.read_text()[-3000:]
            assert time.monotonic() < deadline, what
            time.sleep(0.05)
        os.kill(_children(launcher.pid)[1], signal.SIGTERM)
        launcher.wait(timeout=600)
    finally:
        launcher.kill()
    output = console.read_text()
    assert launcher.returncode == 0, output[-4000:]
    return output


def test_a_keras_program_saves_on_sigterm_and_resumes_without_a_retry(tmp_path: Path) -> None:
    backups = tmp_path / "work" / "checkpoints" / "backup" / "chief"
    output = _preempted_run(
        tmp_path, PROGRAM, "own",
        lambda _console: backups.exists() and any(backups.glob("*.index")),
        "the first epoch never ended",
    )  # fmt: skip
    saved = [int(s) for s in contract.PREEMPTED_SAVED.findall(output)]
    assert len(saved) == 2 and saved[0] == saved[1] and 60 < saved[0] < 120, output[-4000:]
    assert "not a retry: 0/0 used" in output
    assert output.count("optimizer steps 120") == 2, output[-4000:]  # not one step more


def test_a_custom_loop_with_the_preemption_handler_saves_and_resumes_without_a_retry(
    tmp_path: Path,
) -> None:
    output = _preempted_run(
        tmp_path, LOOP, "loop", lambda console: "at step 30" in console,
        "the loop never reached step 30",
    )  # fmt: skip
    assert "tflaunch: preempted" in output and "not a retry: 0/0 used" in output, output[-4000:]
    resumed = [int(line.rsplit(" ", 1)[1]) for line in output.splitlines()
               if "starting at step" in line]  # fmt: skip
    assert sorted(resumed)[:2] == [0, 0] and len(resumed) == 4, output[-4000:]
    assert resumed[2] == resumed[3] and 30 <= resumed[2] < 120, resumed
    assert output.count("optimizer steps 120") == 2, output[-4000:]  # not one step more
