"""A SIGTERM that arrives while MultiWorkerMirroredStrategy starts is not lost.

TensorFlow's coordination service takes SIGTERM over while the strategy starts, before the
trainer can install its own handler; a signal in that window reaches only TensorFlow's
handler. `SigtermFlag` reads the notice that handler leaves in the coordination service, so
the worker still saves before it stops. Real TensorFlow, two workers on loopback: worker 1
signals itself right after the strategy started, exactly inside that window.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.conftest import REPO, free_ports

pytestmark = pytest.mark.tf

WORKER = """
import json, os, signal, sys, time
import tensorflow as tf
from trainer import preemption

strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = strategy.cluster_resolver.task_id
if index == 1:
    os.kill(os.getpid(), signal.SIGTERM)  # TensorFlow's handler, not ours, gets this one
    time.sleep(0.5)
flag = preemption.SigtermFlag(preemption.own_task(strategy))
flag.install()
deadline = time.monotonic() + preemption.NOTICE_SETTLE_SECONDS + 5
while not flag.is_set() and time.monotonic() < deadline:
    time.sleep(0.5)
print(json.dumps({"index": index, "task": preemption.own_task(strategy),
                  "set": flag.is_set()}), flush=True)
"""


def test_a_sigterm_caught_by_tensorflow_at_strategy_start_still_sets_only_that_workers_flag(
    tmp_path: Path,
) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    hosts = [f"127.0.0.1:{port}" for port in free_ports(2)]
    workers = []
    for index in (0, 1):
        env = dict(os.environ)
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
        )
        env["PYTHONPATH"] = str(REPO)
        env["TF_USE_LEGACY_KERAS"] = "1"
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        workers.append(
            subprocess.Popen(
                [sys.executable, str(script)], env=env, cwd=tmp_path, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
        )  # fmt: skip
    results = {}
    for worker in workers:
        out, err = worker.communicate(timeout=600)
        assert worker.returncode == 0, f"exit {worker.returncode}\n{out}\n{err[-3000:]}"
        result = json.loads(out.strip().splitlines()[-1])
        results[result["index"]] = result
    assert results[1] == {"index": 1, "task": "/job:worker/task:1", "set": True}, results
    assert results[0] == {"index": 0, "task": "/job:worker/task:0", "set": False}, results
