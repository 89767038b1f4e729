"""The group restart in place on real pods (spec.restart: inPlace): the training program
inside worker 1's container is SIGKILLed (not the container, not the pod) in a 2-worker
MNIST job with its checkpoints on a PersistentVolume. Both wrappers relaunch their programs
in the same pods at generation 1, both resume from the same checkpoint step, and the job
succeeds: no pod was deleted or created, no container restarted. What the wrapper cannot
see, worker 1's whole container killed, still goes through the pod's replacement, and the
new wrapper joins its peer's next generation.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import ControlPlane, eventually
from tests.node.conftest import node_sh
from tests.node.test_mnist import (  # noqa: F401 (fixtures)
    RESUMED,
    backup_saved,
    kill_worker_1_after_the_first_backup,
    namespace,
    real_node_spec,
    shared_claim,
    worker_lines,
)

pytestmark = [pytest.mark.node, pytest.mark.slow]


def program_of(pod: str) -> int:
    """The host PID of the program the wrapper (the container's PID 1) runs."""
    container = node_sh("crictl", "ps", "-q", "--label", f"io.kubernetes.pod.name={pod}")
    wrapper = json.loads(node_sh("crictl", "inspect", container))["info"]["pid"]
    (child,) = Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()
    return int(child)


def pods(cluster: ControlPlane, where: str) -> dict[str, dict]:
    items = json.loads(cluster.kubectl("get", "pods", "-n", where, "-o", "json").out)["items"]
    return {p["metadata"]["uid"]: p for p in items}


def in_place_spec(path: Path, where: str, image: str, claim: str) -> Path:
    spec = real_node_spec(path, where, image, "indexed")
    document = yaml.safe_load(spec.read_text())
    document["spec"]["trainer"].update(epochs=3, stepsPerEpoch=150)
    document["spec"]["checkpoint"] = {"claimName": claim}
    document["spec"]["restart"] = "inPlace"
    document["spec"]["backoffLimit"] = 1
    spec.write_text(yaml.safe_dump(document))
    return spec


def resumed_steps(logs_out: str, logs: object) -> list[int]:
    """The step each worker resumed from, once each."""
    steps = []
    for worker in (0, 1):
        lines = worker_lines(logs, worker)  # type: ignore[arg-type]
        resumed = [re.search(RESUMED, line) for line in lines if "resuming from the backup" in line]
        assert len(resumed) == 1 and resumed[0] is not None, logs_out
        steps.append(int(resumed[0]["step"]))
    return steps


@pytest.mark.timeout(1200)
def test_a_killed_program_restarts_the_group_in_the_same_pods_from_one_checkpoint(
    real_node: ControlPlane,
    trainer_image: str,
    namespace: str,  # noqa: F811
    shared_claim: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    spec = in_place_spec(tmp_path / "mnist.yaml", namespace, trainer_image, shared_claim)
    assert real_node.tflaunch("submit", str(spec)).code == 0
    eventually(
        lambda: backup_saved(namespace), timeout=600, interval=1,
        what="the first epoch's checkpoint",
    )  # fmt: skip
    before = pods(real_node, namespace)
    (worker_1,) = [
        p["metadata"]["name"]
        for p in before.values()
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "1"
    ]

    os.kill(program_of(worker_1), signal.SIGKILL)

    wait = real_node.tflaunch("wait", "mnist", "-n", namespace, "--timeout", "15m", timeout=1000)
    assert wait.code == 0, wait
    after = pods(real_node, namespace)
    assert set(after) == set(before), "a pod was replaced"
    for pod in after.values():
        assert pod["status"]["phase"] == "Succeeded", pod["status"]
        (container,) = pod["status"]["containerStatuses"]
        assert container["restartCount"] == 0, container
    logs = real_node.tflaunch("logs", "mnist", "-n", namespace)
    for worker in (0, 1):
        lines = worker_lines(logs, worker)
        assert any("restarting in place at generation 1" in line for line in lines), logs.out
    steps = resumed_steps(logs.out, logs)
    assert steps[0] == steps[1] and steps[0] >= 150, steps  # one checkpoint, never from scratch
    # Counted and named, though no pod or container restarted (launcher.core.in_place).
    said = [line for line in wait.err.splitlines() if ": restart in place " in line]
    assert len(said) == 1, wait.err
    assert said[0].startswith("mnist: restart in place 1: worker 1 was killed by SIGKILL"), said
    status = real_node.tflaunch("status", "mnist", "-n", namespace)
    assert "restarts in place: 1; the last: worker 1 was killed by SIGKILL" in status.out, status
    document = json.loads(real_node.tflaunch("status", "mnist", "-n", namespace, "-o", "json").out)
    assert document["status"]["restartsInPlace"] == 1, document["status"]
    assert document["status"]["restarts"] == 0, document["status"]  # no pod was replaced
    assert document["status"]["lastRestartInPlace"].startswith(
        "restart in place 1: worker 1 was killed by SIGKILL"
    ), document["status"]


@pytest.mark.timeout(1200)
def test_a_killed_container_is_replaced_and_its_new_wrapper_joins_the_next_generation(
    real_node: ControlPlane,
    trainer_image: str,
    namespace: str,  # noqa: F811
    shared_claim: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    spec = in_place_spec(tmp_path / "mnist.yaml", namespace, trainer_image, shared_claim)
    assert real_node.tflaunch("submit", str(spec)).code == 0

    kill_worker_1_after_the_first_backup(real_node, namespace)
    chief_before = {
        uid for uid, p in pods(real_node, namespace).items()
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "0"
    }  # fmt: skip

    wait = real_node.tflaunch("wait", "mnist", "-n", namespace, "--timeout", "15m", timeout=1000)
    assert wait.code == 0, wait
    after = pods(real_node, namespace)
    chief_after = {
        uid for uid, p in after.items()
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "0"
    }  # fmt: skip
    assert chief_after == chief_before, "the chief's pod was replaced too"
    assert len(after) == 3, "worker 1's pod was not replaced once"
    logs = real_node.tflaunch("logs", "mnist", "-n", namespace)
    steps = resumed_steps(logs.out, logs)
    assert steps[0] == steps[1] and steps[0] >= 150, steps
