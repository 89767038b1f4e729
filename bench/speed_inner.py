"""One process, the trainer's model in several variants, trained in alternation.

Run by bench_speed.py as a child: `python bench/speed_inner.py ROUNDS STEPS VARIANT...`
with VARIANT one of float32, mixed, xla. Each variant is the trainer's own model
(trainer.model) compiled as the trainer compiles it (steps_per_execution 32) on the
trainer's input pipeline (trainer.data); the variants train STEPS steps each in turn, ROUNDS
times, after one warm-up round, so load changes on a shared machine hit them alike within
seconds. Wall time and this process's CPU time are taken per segment; the CPU time barely
moves with other processes' load. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tf_keras as keras

from trainer import data, model
from trainer.synthetic import make_mnist_like

BATCH = 256
POLICIES = {"float32": "float32", "mixed": "mixed_bfloat16", "xla": "float32"}


def main() -> None:
    rounds, steps, variants = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    mnist = data.Mnist(*make_mnist_like(20480, 16, seed=0).values())
    dataset = data.train_dataset(mnist, BATCH, seed=1, autotune=False)
    models = {}
    for name in variants:
        keras.mixed_precision.set_global_policy(POLICIES[name])
        m = model.build_model()
        model.compile_model(m, 1e-3, 32, jit_compile=name == "xla")
        models[name] = m
    keras.mixed_precision.set_global_policy("float32")
    wall: dict[str, list[float]] = {n: [] for n in variants}
    cpu: dict[str, list[float]] = {n: [] for n in variants}
    for round_ in range(rounds + 1):
        for name, m in models.items():
            w, c = time.perf_counter(), time.process_time()
            m.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
            if round_:  # round 0 traces and warms up
                wall[name].append(time.perf_counter() - w)
                cpu[name].append(time.process_time() - c)
    print(json.dumps({"wall": wall, "cpu": cpu, "images": steps * BATCH}))


if __name__ == "__main__":
    main()
