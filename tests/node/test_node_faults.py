"""The node's own faults while a 2-worker MNIST job runs on the real node:

- the kubelet, then containerd, SIGKILLed and started again, then CoreDNS down for a while,
  all during training: the containers go on, the job succeeds with no restart;
- CoreDNS down while a new job's workers rendezvous: each exits 75 naming its peer after
  rendezvousTimeoutSeconds, and once CoreDNS is back the retried group trains to success;
- worker 1's program frozen with SIGSTOP: its wrapper stops it as a stall once its stall
  watchdog has not run for stallTimeoutSeconds, and the restarted group succeeds;
- worker 1's pod deleted with a 1 s grace period (too short for its save): the group
  restarts and resumes from the last checkpoint;
- the checkpoint volume full after the first epoch's backup: the job stops naming it, not
  retried, and that backup is kept as it was.

Every daemon a test kills is started again in a `finally` (hack/node.sh revive), so the
node is as it was for the tests after these.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import ControlPlane, eventually
from tests.node import jobs as mnist
from tests.node.conftest import node_sh
from tests.node.jobs import RESUMED, backup_saved, real_node_spec, what_happened, worker_lines
from tests.node.test_restart_in_place import pods, program_of

pytestmark = [pytest.mark.node, pytest.mark.slow]

namespace = mnist.namespace  # tests/node/jobs.py's fixtures
shared_claim = mnist.shared_claim

DAEMONS = ("kubelet", "containerd", "coredns")


@contextlib.contextmanager
def revived_after(*daemons: str) -> Iterator[None]:
    """Whatever the test kills of `daemons` runs again when it ends."""
    try:
        yield
    finally:
        for daemon in daemons:
            node_sh("revive", daemon, timeout=180)


def spec_for(path: Path, where: str, image: str, trainer: dict[str, Any], **spec: Any) -> Path:
    document = yaml.safe_load(real_node_spec(path, where, image, "indexed").read_text())
    document["spec"]["trainer"].update(trainer)
    document["spec"].update(spec)
    path.write_text(yaml.safe_dump(document))
    return path


def serving(cp: ControlPlane, where: str) -> bool:
    """Both workers' strategies are up: training starts."""
    logs = cp.tflaunch("logs", "mnist", "-n", where)
    return all(any("strategy ready" in line for line in worker_lines(logs, w)) for w in (0, 1))


def worker_pod(cp: ControlPlane, where: str, index: int) -> dict[str, Any]:
    (pod,) = cp.get("pods", "-n", where, "-l", f"batch.kubernetes.io/job-completion-index={index}")[
        "items"
    ]
    return dict(pod)


def wait(cp: ControlPlane, where: str, timeout: str = "10m") -> Any:
    return cp.tflaunch("wait", "mnist", "-n", where, "--timeout", timeout, timeout=700)


def job_status(cp: ControlPlane, where: str) -> dict[str, Any]:
    run = cp.tflaunch("status", "mnist", "-n", where, "-o", "json")
    return dict(json.loads(run.out)["status"])


@pytest.mark.timeout(900)
def test_the_kubelet_containerd_and_coredns_die_and_return_while_training_goes_on(
    real_node: ControlPlane,
    trainer_image: str,
    namespace: str,
    tmp_path: Path,
) -> None:
    cp = real_node
    # What is tested is the daemons, not the machine's load: with CI's four test units on
    # two cores, a worker starved past TensorFlow's 10 s heartbeat is taken for dead and the
    # group restarts (tests/trainer/test_restart_in_place.py covers that restart).
    trainer = {"epochs": 4, "stepsPerEpoch": 150, "heartbeatTimeoutSeconds": 60}
    spec = spec_for(tmp_path / "mnist.yaml", namespace, trainer_image, trainer)
    assert cp.tflaunch("submit", str(spec)).code == 0
    eventually(lambda: serving(cp, namespace), timeout=600, interval=1, what="training")
    before = pods(cp, namespace)

    recovered = {}
    with revived_after(*DAEMONS):
        for daemon in DAEMONS:
            node_sh("kill", daemon)
            time.sleep(5)  # the daemon stays dead a while, as after a crash
            start = time.monotonic()
            node_sh("revive", daemon, timeout=180)
            recovered[daemon] = round(time.monotonic() - start, 1)
    phases = [p["status"]["phase"] for p in pods(cp, namespace).values()]
    print(f"revived in seconds: {recovered}; pods then: {phases}")

    assert phases == ["Running", "Running"], "the faults came after training ended"
    run = wait(cp, namespace)
    assert run.code == 0, f"{run.err}\n{what_happened(cp, namespace)}"
    after = pods(cp, namespace)
    assert set(after) == set(before), "a pod was replaced"
    for pod in after.values():
        (container,) = pod["status"]["containerStatuses"]
        assert container["restartCount"] == 0, container
    assert [w["restarts"] for w in job_status(cp, namespace)["workers"]] == [0, 0]


@pytest.mark.timeout(900)
def test_coredns_down_during_the_rendezvous_exits_75_naming_the_peer_then_trains_once_back(
    real_node: ControlPlane,
    trainer_image: str,
    namespace: str,
    tmp_path: Path,
) -> None:
    cp = real_node
    spec = spec_for(
        tmp_path / "mnist.yaml", namespace, trainer_image,
        {"epochs": 1, "stepsPerEpoch": 20, "rendezvousTimeoutSeconds": 15}, backoffLimit=2,
        restart="recreate",  # the failed pod is replaced
    )  # fmt: skip

    with revived_after("coredns"):
        node_sh("kill", "coredns")
        assert cp.tflaunch("submit", str(spec)).code == 0
        pod = eventually(
            lambda: mnist.failed_pod(cp, namespace), timeout=300,
            what="a worker to fail its rendezvous",
        )  # fmt: skip
    state = mnist.exited_75_naming_its_peer(cp, pod, namespace, seconds=15, in_place=False)
    print(f"rendezvous: {state['startedAt']} -> {state['finishedAt']}")

    run = wait(cp, namespace)

    assert run.code == 0, run
    assert job_status(cp, namespace)["state"] == "Succeeded"


@pytest.mark.timeout(900)
def test_a_frozen_worker_program_is_stopped_as_a_stall_and_the_group_succeeds(
    real_node: ControlPlane, trainer_image: str, namespace: str, tmp_path: Path
) -> None:
    """SIGSTOP freezes worker 1's trainer, its own stall watchdog with it; its wrapper (the
    container's PID 1) runs on and stops it once the watchdog's alive file is older than
    stallTimeoutSeconds. Worker 0 had already failed on the missing heartbeats."""
    cp = real_node
    spec = spec_for(
        tmp_path / "mnist.yaml", namespace, trainer_image,
        {"epochs": 3, "stepsPerEpoch": 150, "stallTimeoutSeconds": 20},
        restart="recreate",  # the stopped worker fails its pod (in place: it relaunches)
    )  # fmt: skip
    assert cp.tflaunch("submit", str(spec)).code == 0
    eventually(lambda: serving(cp, namespace), timeout=600, interval=1, what="training")
    frozen = worker_pod(cp, namespace, 1)
    program = program_of(frozen["metadata"]["name"])

    os.kill(program, signal.SIGSTOP)
    start = time.monotonic()
    try:

        def stopped() -> dict[str, Any] | None:
            pod = cp.get("pod", frozen["metadata"]["name"], "-n", namespace)
            return pod if pod["status"].get("phase") == "Failed" else None

        pod = eventually(stopped, timeout=120, interval=1, what="the frozen worker stopped")
        print(f"frozen to stopped: {time.monotonic() - start:.0f} s")
        run = wait(cp, namespace)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(program, signal.SIGCONT)
    print(f"frozen to the job's end: {time.monotonic() - start:.0f} s")

    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 1, terminated
    froze = "no progress for 20s: the program froze (its stall watchdog stopped)"
    assert froze in terminated.get("message", ""), terminated
    assert run.code == 0, run
    assert job_status(cp, namespace)["state"] == "Succeeded"


@pytest.mark.timeout(900)
def test_a_pod_deleted_with_a_one_second_grace_resumes_from_the_last_checkpoint(
    real_node: ControlPlane,
    trainer_image: str,
    namespace: str,
    shared_claim: str,
    tmp_path: Path,
) -> None:
    cp = real_node
    spec = spec_for(
        tmp_path / "mnist.yaml", namespace, trainer_image,
        {"epochs": 3, "stepsPerEpoch": 150}, checkpoint={"claimName": shared_claim},
    )  # fmt: skip
    assert cp.tflaunch("submit", str(spec)).code == 0
    eventually(
        lambda: backup_saved(namespace), timeout=600, interval=1,
        what="the first epoch's checkpoint",
    )  # fmt: skip
    worker_1 = worker_pod(cp, namespace, 1)["metadata"]["name"]

    cp.kubectl("delete", "pod", worker_1, "-n", namespace, "--grace-period=1", "--wait=false")
    run = wait(cp, namespace)

    assert run.code == 0, run
    logs = cp.tflaunch("logs", "mnist", "-n", namespace)
    for worker in (0, 1):
        lines = worker_lines(logs, worker)
        resumed = [re.search(RESUMED, line) for line in lines if "resuming from the backup" in line]
        assert len(resumed) == 1 and resumed[0] is not None, logs.out
        assert int(resumed[0]["step"]) >= 150, logs.out  # the first epoch's, not from scratch
    print(run.err)


@pytest.fixture
def small_claim(shared_claim: str, namespace: str) -> Iterator[Path]:
    """shared_claim's volume on a 64 MiB tmpfs of its own, so it can fill up without the
    node's disk doing so."""
    path = Path(node_sh("state")) / "volumes" / namespace
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", str(path)],
                   check=True, timeout=30)  # fmt: skip
    try:
        os.chown(path, 10001, 10001)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, timeout=30)


def fill(volume: Path) -> None:
    """Write a file until the volume has no space left."""
    with open(volume / "filler", "wb") as filler, contextlib.suppress(OSError):
        while True:
            filler.write(b"\0" * (1 << 20))
            filler.flush()
    with contextlib.suppress(OSError), open(volume / "filler-tail", "wb") as tail:
        while True:
            tail.write(b"\0" * 4096)
            tail.flush()


@pytest.mark.timeout(900)
def test_a_full_checkpoint_volume_stops_the_job_naming_it_and_keeps_the_last_good_checkpoint(
    real_node: ControlPlane, trainer_image: str, namespace: str, small_claim: Path,
    tmp_path: Path,
) -> None:  # fmt: skip
    cp = real_node
    spec = spec_for(
        tmp_path / "mnist.yaml", namespace, trainer_image,
        {"epochs": 3, "stepsPerEpoch": 150}, checkpoint={"claimName": "checkpoints"},
        backoffLimit=2,
    )  # fmt: skip
    assert cp.tflaunch("submit", str(spec)).code == 0
    eventually(
        lambda: backup_saved(namespace), timeout=600, interval=1,
        what="the first epoch's checkpoint",
    )  # fmt: skip
    (index,) = small_claim.glob("**/chief/checkpoint")
    time.sleep(2)  # the index is written last; let the save end
    saved = index.read_text()

    fill(small_claim)
    run = wait(cp, namespace)

    assert run.code == 3, run  # failed, not retried
    assert "no space left on a volume this worker writes" in run.out + run.err, run
    assert "not retried" in run.out + run.err, run
    assert [w["restarts"] for w in job_status(cp, namespace)["workers"]] == [0, 0]
    assert index.read_text() == saved  # still the first epoch's backup
    named = re.search(r'model_checkpoint_path: "([^"]+)"', saved)
    assert named is not None, saved
    assert list(index.parent.glob(f"{named[1]}.index")), sorted(index.parent.iterdir())
    print(run.err)
