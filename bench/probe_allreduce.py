"""What one all-reduce costs between two local workers: the demo's per-step floor.

Two processes on this machine, MultiWorkerMirroredStrategy with RING (as the trainer on
CPUs), each all-reducing, inside one tf.function, `--reps` chained all-reduces of:

* tiny: 10 float32 values (latency only: what an evaluation step or a metric read pays),
* grads: the demo CNN's gradients as one flat float32 tensor (694,282 values, 2.8 MB; Keras
  packs a step's gradients into one all-reduce like this),
* grads-bf16: the same in bfloat16 (half the bytes).

Prints milliseconds per all-reduce: on the traced function's first call, which also resolves
each collective instance with the group leader (what a training loop's first execution and an
evaluation's first call pay), and on later calls (the best of `--calls`), which is what every
training step pays.

Usage: .venv/bin/python bench/probe_allreduce.py [--reps 20] [--calls 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import free_ports

CASES = {
    "tiny": (10, "float32"),
    "grads": (694_282, "float32"),
    "grads-bf16": (694_282, "bfloat16"),
}


def worker(index: int, ports: list[int], reps: int, calls: int) -> None:
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": index}}
    )
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    ring = tf.distribute.experimental.CommunicationImplementation.RING
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=ring)
    )
    for name, (size, dtype) in CASES.items():

        @tf.function
        def chained(size: int = size, dtype: str = dtype) -> tf.Tensor:
            def replica() -> tf.Tensor:
                context = tf.distribute.get_replica_context()
                value = tf.ones([size], dtype)
                for _ in range(reps):
                    value = context.all_reduce(tf.distribute.ReduceOp.SUM, value) / 2
                return value[0]

            return strategy.run(replica)

        def seconds_per_call() -> float:
            started = time.monotonic()
            chained().numpy()
            return time.monotonic() - started

        chained.get_concrete_function()  # tracing, outside both measurements
        first = seconds_per_call()
        later = min(seconds_per_call() for _ in range(calls))
        if index == 0:
            print(
                f"{name:>10}: first call {first / reps * 1000:6.1f} ms, "
                f"later calls {later / reps * 1000:6.1f} ms per all-reduce",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20, help="chained all-reduces per call")
    parser.add_argument("--calls", type=int, default=3, help="later calls; the best is shown")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ports", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, [int(p) for p in args.ports.split(",")], args.reps, args.calls)
        return
    ports = ",".join(str(p) for p in free_ports(2))
    print(f"load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    argv = [sys.executable, __file__, "--reps", str(args.reps), "--calls", str(args.calls)]
    argv += ["--ports", ports, "--worker"]
    peer = subprocess.Popen([*argv, "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    chief = subprocess.run([*argv, "0"], stderr=subprocess.DEVNULL)
    peer.wait()
    sys.exit(chief.returncode or peer.returncode)


if __name__ == "__main__":
    main()
