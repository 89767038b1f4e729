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
from tests.node.jobs import (  # noqa: F401 (fixtures)
    backup_saved,
    kill_worker_1_after_the_first_backup,
    namespace,
    real_node_spec,
    shared_claim,
    worker_lines,
)
from trainer import standby

pytestmark = [pytest.mark.node, pytest.mark.slow]


def program_of(pod: str) -> int:
    """The host PID of the program the wrapper (the container's PID 1) runs."""
    container = node_sh("crictl", "ps", "-q", "--label", f"io.kubernetes.pod.name={pod}")
    wrapper = json.loads(node_sh("crictl", "inspect", container))["info"]["pid"]
    return the_program_of(wrapper)


def the_program_of(wrapper: int) -> int:
    """The wrapper's child that is its program, not a waiting standby (`trainer.standby`)."""
    children = Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()
    (program,) = [
        int(pid)
        for pid in children
        if Path(f"/proc/{pid}/comm").read_text().strip() != standby.PROCESS_NAME
    ]
    return program


def pods(cluster: ControlPlane, where: str) -> dict[str, dict]:
    items = json.loads(cluster.kubectl("get", "pods", "-n", where, "-o", "json").out)["items"]
    return {p["metadata"]["uid"]: p for p in items}


def pods_created(cluster: ControlPlane, where: str) -> list[str]:
    """The pods the Job controller created in `where`, from its SuccessfulCreate events: a
    failed Job deletes the pods still running, so the pods left cannot tell a recreation."""
    events = json.loads(
        cluster.kubectl(
            "get",
            "events",
            "-n",
            where,
            "--field-selector",
            "reason=SuccessfulCreate",
            "-o",
            "json",
        ).out
    )["items"]
    return sorted(
        e["message"] for e in events if e["involvedObject"]["kind"] == "Job"
    )  # "Created pod: <name>", one event per pod (distinct messages are never merged)


def in_place_spec(path: Path, where: str, image: str, claim: str) -> Path:
    spec = real_node_spec(path, where, image, "indexed")
    document = yaml.safe_load(spec.read_text())
    document["spec"]["trainer"].update(epochs=3, stepsPerEpoch=150)
    document["spec"]["checkpoint"] = {"claimName": claim}
    document["spec"]["restart"] = "inPlace"
    document["spec"]["backoffLimit"] = 1
    spec.write_text(yaml.safe_dump(document))
    return spec


RESUMED_ANYWHERE = r"at step (?P<step>\d+) \(epoch \d+, step \d+\)"
"""A resume at an epoch's end (its backup), or mid-epoch: where every worker saved on the
SIGTERM of a pod deletion, when it came after the program had started training."""


def resumed_steps(logs_out: str, logs: object) -> list[int]:
    """The step each worker resumed from, once each."""
    steps = []
    for worker in (0, 1):
        lines = worker_lines(logs, worker)  # type: ignore[arg-type]
        said = [line for line in lines if "resuming from the backup" in line]
        resumed = [re.search(RESUMED_ANYWHERE, line) for line in said]
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
def test_a_killed_container_restarts_in_its_own_pod_and_its_new_wrapper_joins_the_next_generation(
    real_node: ControlPlane,
    trainer_image: str,
    namespace: str,  # noqa: F811
    shared_claim: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Worker 1's whole container SIGKILLed through containerd (`crictl stop --timeout 0`,
    what a container OOM kill does to the wrapper): the kubelet restarts it in the same pod
    (the container's restartPolicyRules, exit 137), its new wrapper joins the group's next
    generation, and both workers resume from one checkpoint. No pod is created or replaced."""
    spec = in_place_spec(tmp_path / "mnist.yaml", namespace, trainer_image, shared_claim)
    assert real_node.tflaunch("submit", str(spec)).code == 0
    rendered = real_node.get("job", "mnist-worker", "-n", namespace)
    (container,) = rendered["spec"]["template"]["spec"]["containers"]
    assert container["restartPolicyRules"][0]["exitCodes"]["values"] == [137], container

    kill_worker_1_after_the_first_backup(real_node, namespace)
    before = pods(real_node, namespace)

    wait = real_node.tflaunch("wait", "mnist", "-n", namespace, "--timeout", "15m", timeout=1000)
    assert wait.code == 0, wait
    after = pods(real_node, namespace)
    assert set(after) == set(before), "a pod was replaced"
    assert len(pods_created(real_node, namespace)) == 2, "a pod was created"
    restarts = {
        p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]: (
            p["status"]["phase"], p["status"]["containerStatuses"][0]["restartCount"]
        )
        for p in after.values()
    }  # fmt: skip
    assert restarts == {"0": ("Succeeded", 0), "1": ("Succeeded", 1)}, restarts
    logs = real_node.tflaunch("logs", "mnist", "-n", namespace)
    steps = resumed_steps(logs.out, logs)
    assert steps[0] == steps[1] and steps[0] >= 150, steps
    said = [line for line in wait.err.splitlines() if ": restart in place " in line]
    # Said once, not as a recreation: in the words of what the wrappers saw (worker 0's
    # program failing on its dead peer, or, when none saw a program fail, a wrapper replaced).
    assert len(said) == 1 and said[0].startswith("mnist: restart in place 1: "), wait.err
    assert restarts_in_place(real_node, namespace)["restartsInPlace"] == 1


def restarts_in_place(cluster: ControlPlane, where: str) -> dict:
    status = cluster.tflaunch("status", "mnist", "-n", where, "-o", "json")
    return json.loads(status.out)["status"] if status.code == 0 else {}


@pytest.mark.timeout(1500)
def test_pods_all_recreated_after_a_restart_in_place_continue_the_jobs_generation(
    real_node: ControlPlane,
    trainer_image: str,
    namespace: str,  # noqa: F811
    shared_claim: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A restart in place, then both pods deleted: the Job controller recreates both pods,
    no peer is left to tell their wrappers the generation. They continue it from the
    checkpoint volume (keyed by the Job's uid, $TFLAUNCH_JOB_UID), and the new chief's log
    names the restart again: status still counts it."""
    spec = in_place_spec(tmp_path / "mnist.yaml", namespace, trainer_image, shared_claim)
    document = yaml.safe_load(spec.read_text())
    document["spec"]["trainer"].update(epochs=4)
    document["spec"]["backoffLimit"] = 2  # the indexed Job: 4 failed pods
    spec.write_text(yaml.safe_dump(document))
    assert real_node.tflaunch("submit", str(spec)).code == 0
    eventually(
        lambda: backup_saved(namespace), timeout=600, interval=1,
        what="the first epoch's checkpoint",
    )  # fmt: skip
    before = pods(real_node, namespace)
    by_index = {
        p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]: p["metadata"]["name"]
        for p in before.values()
    }
    os.kill(program_of(by_index["1"]), signal.SIGKILL)
    eventually(
        lambda: restarts_in_place(real_node, namespace).get("restartsInPlace") == 1,
        timeout=300, interval=2, what="the restart in place counted",
    )  # fmt: skip

    # Every wrapper gone with its pod, so no peer keeps the generation: both pods deleted
    # (each worker saves and exits 79, and the Job controller recreates them, no retry used).
    real_node.kubectl(
        "delete", "pod", "-n", namespace, by_index["1"], by_index["0"], "--wait=false"
    )

    wait = real_node.tflaunch("wait", "mnist", "-n", namespace, "--timeout", "20m", timeout=1300)
    assert wait.code == 0, wait
    after = pods(real_node, namespace)
    assert not set(after) & set(before), "both pods were not recreated"
    assert len(pods_created(real_node, namespace)) == 4, "both pods were not recreated once"
    logs = real_node.tflaunch("logs", "mnist", "-n", namespace)
    for worker in (0, 1):
        lines = worker_lines(logs, worker)
        said = "continuing this Job's generation 1 (from its checkpoint volume)"
        assert any(said in line for line in lines), logs.out
    steps = resumed_steps(logs.out, logs)
    assert steps[0] == steps[1] and steps[0] >= 150, steps
    status = restarts_in_place(real_node, namespace)
    assert status["restartsInPlace"] == 1, status  # 0 before: the count was lost
    assert status["lastRestartInPlace"].startswith(
        "restart in place 1: worker 1 was killed by SIGKILL"
    ), status
