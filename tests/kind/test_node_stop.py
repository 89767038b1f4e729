"""A kind worker node stopped while the group trains, then started again (issue 34): the two
workers are on different nodes (a required anti-affinity) and checkpoint to one directory
that every node mounts (hack/kind.sh's shared host directory, as a ReadWriteMany claim).

The job restarts in place (the default): the survivor's program fails on the lost peer and
its wrapper restarts it in its own pod, then waits at the barrier for its peer; the lost
node's pod fails once the node is back, the Job replaces it, and the new wrapper joins the
survivor's generation. The job must end Succeeded, the group resuming from the last backup,
and `wait` must say what happened on the way (the replaced worker and the restart in place)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, eventually, stop_process
from tests.kind.conftest import Kind, kind_sh, mnist_spec, shared_claim

pytestmark = pytest.mark.timeout(2400)  # a node stopped, minutes of recovery, training


def chief_log(kind: Kind, namespace: str) -> str:
    run = kind.kubectl(
        "logs", "-n", namespace, "-l", "batch.kubernetes.io/job-completion-index=0",
        "--tail=-1", check=False,
    )  # fmt: skip
    return run.out


def test_a_node_stopped_mid_training_and_started_again_ends_in_success_resumed(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    volume = shared_claim(kind, namespace)
    spec = mnist_spec(
        tmp_path / "job.yaml", "nodestop", namespace, kind.trainer,
        trainer={"epochs": 4, "stepsPerEpoch": 60, "globalBatchSize": 256, "saveFreq": "epoch"},
        checkpoint={"claimName": "checkpoints"},
    )  # fmt: skip
    assert kind.tflaunch("submit", str(spec)).code == 0
    wait = subprocess.Popen(
        [sys.executable, "-m", "launcher", "wait", "nodestop", "-n", namespace, "--timeout", "30m"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=kind.env(), cwd=ROOT,
    )  # fmt: skip
    said: list[str] = []

    def read() -> None:
        for line in wait.stdout or []:
            said.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stopped = None
    try:
        eventually(lambda: "epoch 1/4:" in chief_log(kind, namespace), timeout=900, interval=5,
                   what="the chief past its first epoch (saved at its end)")  # fmt: skip
        pods = kind.get("pods", "-n", namespace)["items"]
        nodes = {p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]:
                 p["spec"]["nodeName"] for p in pods}  # fmt: skip
        assert len(set(nodes.values())) == 2, nodes
        stopped = nodes["1"]
        kind.docker("stop", "-t", "2", stopped)
        stopped_at = time.monotonic()
        # The survivor restarts in place and waits for its peer at the barrier
        # (trainer.rendezvousTimeoutSeconds); `wait` says so once the group is whole again.
        eventually(
            lambda: "restarting in place at generation 1" in chief_log(kind, namespace),
            timeout=600, interval=2, what="the survivor's restart in place",
        )  # fmt: skip
        while time.monotonic() - stopped_at < 60:  # the node stays away a minute
            time.sleep(5)
    finally:
        if stopped is not None:
            kind.docker("start", stopped)
            kind_sh("up")  # the node's pod routes again (this rig has no kindnetd)
    try:
        wait.wait(timeout=1800)
    finally:
        stop_process(wait)
        reader.join(timeout=10)
        kind.kubectl("delete", "pv", volume, "--wait=false", check=False)
    text = "".join(said)

    assert wait.returncode == 0, text
    assert "worker 1 restarted" in text, text  # the lost node's pod, failed once it came back
    assert "restart in place 1:" in text, text  # the survivor's, said once the group met
    assert "resuming from the backup" in chief_log(kind, namespace), text
