"""MNIST trains in containers across two nodes: `tflaunch submit examples/mnist.yaml --workers
2 --wait` on the kind rig, one worker on each kind worker node (a required anti-affinity),
with the CPU trainer image the nodes pull from the registry, in both layouts. The two workers
find each other through the headless Service and CoreDNS, rendezvous under
MultiWorkerMirroredStrategy over the routed pod network and train with 2 replicas, ending
with the same weights. The same image also runs under the restricted Pod Security level; a
worker whose peer never gets an address fails with the rendezvous exit code (75) on a real
DNS miss; a worker whose container is killed makes the group restart once and resume from
the checkpoint on a claim both nodes mount; an evicted worker makes every worker save and
exit 79, and the job resumes without using a retry; an image that is not on the nodes, with
`imagePullPolicy: Never`, ends `wait` with exit 5. The user's own programs run the same way
(`submit --script`): a one-file Keras program (examples/custom/keras_mnist.py) on the MNIST
the image bakes in, and TensorFlow's two-file tutorial layout (tests/data/tutorial_layout,
main.py importing its neighbour) carried to the pods in one ConfigMap."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, Run, eventually
from tests.kind.conftest import (
    Kind,
    backup_saved,
    crictl,
    mnist_spec,
    own_program_spec,
    shared_claim,
    worker_pod,
)
from tests.node.jobs import RESUMED, exited_75_naming_its_peer, failed_pod, worker_lines

pytestmark = pytest.mark.timeout(1200)  # image pulls and training: minutes

KERAS_MNIST = ROOT / "examples" / "custom" / "keras_mnist.py"
TUTORIAL_LAYOUT = ROOT / "tests" / "data" / "tutorial_layout"


def submit(kind: Kind, spec: Path, *args: str) -> Run:
    return kind.tflaunch("submit", str(spec), *args, "--wait", "--timeout", "15m", timeout=1000)


def on_both_nodes(kind: Kind, namespace: str, name: str) -> dict[str, Any]:
    """`status -o json` of job `name`: Succeeded, each worker exit 0, one on each kind worker."""
    status = kind.tflaunch("status", name, "-n", namespace, "-o", "json")
    assert status.code == 0, status
    job: dict[str, Any] = json.loads(status.out)["status"]
    assert job["state"] == "Succeeded", status.out
    assert [(w["phase"], w["exitCode"]) for w in job["workers"]] == [("Succeeded", 0)] * 2
    assert sorted(w["node"] for w in job["workers"]) == kind.workers(), status.out
    return job


def same_weights(logs: Run) -> None:
    weights = []
    for worker in (0, 1):
        lines = worker_lines(logs, worker)
        weights += [line.split("weights sha256 ")[1] for line in lines if "weights sha256 " in line]
    assert len(weights) == 2 and weights[0] == weights[1], weights  # all-reduce kept them equal


@pytest.mark.parametrize("layout", ["indexed", "per-worker"])
def test_mnist_trains_on_two_workers_on_two_nodes(
    kind: Kind, namespace: str, tmp_path: Path, layout: str
) -> None:
    spec = mnist_spec(tmp_path / "mnist.yaml", "mnist", namespace, kind.trainer, layout=layout)

    run = submit(kind, spec)

    assert run.code == 0, run
    assert "job mnist succeeded" in run.out + run.err, run
    on_both_nodes(kind, namespace, "mnist")
    progress = kind.tflaunch("status", "mnist", "-n", namespace)
    assert "training: epoch 1/1, step 20/20, loss " in progress.out, progress
    logs = kind.tflaunch("logs", "mnist", "-n", namespace)
    assert logs.code == 0, logs
    for worker in (0, 1):
        lines = worker_lines(logs, worker)
        assert any("plan: TrainingPlan(workers=2, replicas=2" in line for line in lines), logs.out
        assert any("epoch 1/1: loss=" in line for line in lines), logs.out
    same_weights(logs)


def test_a_one_file_keras_program_trains_on_two_workers_on_two_nodes(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    spec = own_program_spec(
        tmp_path / "job.yaml", namespace, kind.trainer, "keras-mnist",
        "--epochs", "1", "--steps-per-epoch", "20", "--data", "/opt/tflaunch/mnist.npz",
    )  # fmt: skip

    run = submit(kind, spec, "--script", str(KERAS_MNIST))

    assert run.code == 0, run
    assert "job keras-mnist succeeded" in run.out + run.err, run
    on_both_nodes(kind, namespace, "keras-mnist")
    logs = kind.tflaunch("logs", "keras-mnist", "-n", namespace)
    assert logs.code == 0, logs
    for worker in (0, 1):
        assert "replicas in sync: 2" in worker_lines(logs, worker), logs.out
    assert any(re.match(r"20/20 - .*loss: ", line) for line in worker_lines(logs, 0)), logs.out
    same_weights(logs)


def test_the_two_file_tutorial_layout_trains_on_two_workers_on_two_nodes(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    """main.py imports mnist_setup.py: both travel in the job's ConfigMap and are importable
    side by side in every container."""
    spec = own_program_spec(
        tmp_path / "job.yaml", namespace, kind.trainer, "tutorial",
        "--epochs", "2", "--steps-per-epoch", "8",
    )  # fmt: skip

    run = submit(kind, spec, "--script", str(TUTORIAL_LAYOUT / "main.py"))

    assert run.code == 0, run
    assert "job tutorial succeeded" in run.out + run.err, run
    on_both_nodes(kind, namespace, "tutorial")
    selector = ("-n", namespace, "-l", "tflaunch.dev/job-name=tutorial")
    (config_map,) = kind.get("configmaps", *selector)["items"]
    pod = kind.get("pods", *selector)["items"][0]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "script")["configMap"]
    assert volume["name"] == config_map["metadata"]["name"]
    paths = {i["key"]: i["path"] for i in volume.get("items", [])}  # keys that cannot be paths
    carried = {paths.get(key, key): text for key, text in config_map["data"].items()}
    assert carried == {
        name: (TUTORIAL_LAYOUT / name).read_text() for name in ("main.py", "mnist_setup.py")
    }
    logs = kind.tflaunch("logs", "tutorial", "-n", namespace)
    assert logs.code == 0, logs
    for worker in (0, 1):
        assert "replicas in sync: 2" in worker_lines(logs, worker), logs.out
    chief = worker_lines(logs, 0)
    assert "Epoch 2/2" in chief, logs.out
    assert any(re.match(r"8/8 \[=+\]", line) for line in chief), logs.out  # its progress bar


def test_restricted_pod_security_admits_the_workers_and_they_train(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    kind.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    spec = mnist_spec(tmp_path / "mnist.yaml", "mnist", namespace, kind.trainer)

    run = submit(kind, spec)

    assert run.code == 0, run
    pods = kind.get("pods", "-n", namespace)["items"]
    assert [p["status"]["phase"] for p in pods] == ["Succeeded", "Succeeded"]
    for pod in pods:  # what the kubelet and runc enforced while TensorFlow ran
        container = pod["spec"]["containers"][0]["securityContext"]
        assert container["readOnlyRootFilesystem"] is True
        assert container["runAsNonRoot"] is True
        assert pod["spec"]["securityContext"]["runAsUser"] == 10001
        assert pod["spec"]["automountServiceAccountToken"] is False


@pytest.mark.timeout(900)
def test_a_worker_whose_peer_never_comes_up_exits_75_naming_it(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    # Both workers on one node (the anti-affinity dropped), 1.5 CPU each of its 2: one worker
    # runs, its peer stays Pending (no address, so no DNS record under the headless Service).
    spec = mnist_spec(
        tmp_path / "mnist.yaml", "mnist", namespace, kind.trainer,
        affinity=None, nodeSelector={"kubernetes.io/hostname": kind.workers()[0]},
        resources={"requests": {"cpu": "1500m", "memory": "1Gi"}, "limits": {"memory": "3Gi"}},
        backoffLimit=0,
        trainer={"rendezvousTimeoutSeconds": 20},
    )  # fmt: skip

    run = kind.tflaunch("submit", str(spec), timeout=120)

    assert run.code == 0, run
    pod = eventually(lambda: failed_pod(kind, namespace), timeout=600, what="a worker to fail")
    exited_75_naming_its_peer(kind, pod, namespace, seconds=20, in_place=True)


def test_a_killed_worker_restarts_the_group_which_resumes_from_the_checkpoint(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    claim = shared_claim(kind, namespace)
    spec = mnist_spec(
        tmp_path / "mnist.yaml", "mnist", namespace, kind.trainer,
        trainer={"epochs": 4, "stepsPerEpoch": 150},
        checkpoint={"claimName": "checkpoints"},
        restart="recreate",  # the pods replaced (tests/node/test_restart_in_place: kept)
    )  # fmt: skip
    assert kind.tflaunch("submit", str(spec)).code == 0
    try:
        eventually(
            lambda: backup_saved(kind, namespace), timeout=600, interval=1,
            what="the first epoch's checkpoint",
        )  # fmt: skip
        # SIGKILL worker 1's container through its node's containerd, as an OOM kill would
        # (not a pod deletion: the pod stays).
        pod = worker_pod(kind, namespace, 1)
        node, name = pod["spec"]["nodeName"], pod["metadata"]["name"]
        container = crictl(kind, node, "ps", "-q", "--label", f"io.kubernetes.pod.name={name}")
        crictl(kind, node, "stop", "--timeout", "0", container)

        wait = kind.tflaunch("wait", "mnist", "-n", namespace, "--timeout", "15m", timeout=1000)
    finally:
        kind.kubectl("delete", "pv", claim, "--wait=false", check=False)

    assert wait.code == 0, wait
    status = json.loads(kind.tflaunch("status", "mnist", "-n", namespace, "-o", "json").out)
    assert [w["restarts"] for w in status["status"]["workers"]] == [1, 1], status
    logs = kind.tflaunch("logs", "mnist", "-n", namespace)
    for worker in (0, 1):
        lines = worker_lines(logs, worker)
        resumed = [re.search(RESUMED, line) for line in lines if "resuming from the backup" in line]
        assert len(resumed) == 1 and resumed[0] is not None, logs.out
        assert int(resumed[0]["step"]) >= 150, logs.out  # at an epoch's end, never from scratch


def test_an_evicted_worker_makes_every_worker_save_and_the_job_resume_without_a_retry(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    claim = shared_claim(kind, namespace)
    spec = mnist_spec(
        tmp_path / "mnist.yaml", "mnist", namespace, kind.trainer,
        trainer={"epochs": 3, "stepsPerEpoch": 150},
        checkpoint={"claimName": "checkpoints"},
        backoffLimit=0,  # a preemption must not need a retry
    )  # fmt: skip
    assert kind.tflaunch("submit", str(spec)).code == 0

    def training() -> bool:
        logs = kind.tflaunch("logs", "mnist", "-n", namespace)
        return any("epoch 1/3: loss=" in line for line in worker_lines(logs, 0))

    try:
        eventually(training, timeout=600, interval=1, what="the first epoch")
        pod = worker_pod(kind, namespace, 1)["metadata"]["name"]
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        # What a node drain does: the kubelet sends SIGTERM, then waits out the grace period.
        url = f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction"
        kind.kubectl("create", "--raw", url, "-f", "-", stdin=json.dumps(eviction))

        wait = kind.tflaunch("wait", "mnist", "-n", namespace, "--timeout", "15m", timeout=1000)
    finally:
        kind.kubectl("delete", "pv", claim, "--wait=false", check=False)

    assert wait.code == 0, wait
    status = json.loads(kind.tflaunch("status", "mnist", "-n", namespace, "-o", "json").out)
    assert status["status"]["state"] == "Succeeded", status
    assert status["status"]["preemptions"] >= 1, status
    step = status["status"]["resumedAtStep"]
    assert step is not None and step > 150, status  # saved after the first epoch
    text = kind.tflaunch("status", "mnist", "-n", namespace).out
    assert f"resumed at step {step}" in text and "preempted" in text, text


@pytest.mark.timeout(600)
def test_an_image_not_on_the_nodes_with_pull_policy_never_ends_the_wait_with_exit_5(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    spec = mnist_spec(
        tmp_path / "mnist.yaml", "mnist", namespace, "tflaunch.dev/nosuch:1",
        imagePullPolicy="Never",
    )  # fmt: skip

    run = kind.tflaunch("submit", str(spec), "--wait", "--timeout", "10m", timeout=700)

    assert run.code == 5, run
    error = run.err.strip().splitlines()[-1]
    assert "will never start: image" in error and "nosuch:1" in error, run.err
    assert "ErrImageNeverPull" in error and "load the image into every node" in error, run.err
    assert "lacks room" not in run.err, run.err
    jobs = kind.get("jobs", "-n", namespace)["items"]
    assert jobs, "the job's objects are left as they are"
