"""MNIST trains in containers: `tflaunch submit examples/mnist.yaml --workers 2 --wait` on the
real node with the CPU trainer image built here (hack/images.sh), in both layouts. The two
workers find each other through the headless Service and CoreDNS, rendezvous under
MultiWorkerMirroredStrategy over the pod network and train with 2 replicas. The same
image also runs under the restricted Pod Security level, and a worker whose peer never gets
an address fails with the rendezvous exit code (75) on a real DNS miss, and a worker whose
container is killed makes the group restart once and resume from the checkpoint on a
PersistentVolume on the node's disk; an evicted worker makes every worker save and exit 79,
and the job resumes without using a retry. The user's own programs run the same way
(`submit --script`): a one-file Keras program (examples/custom/keras_mnist.py) on the MNIST
the image bakes in, and TensorFlow's two-file tutorial layout (tests/data/tutorial_layout,
main.py importing its neighbour) carried to the pods in one ConfigMap.

The archive is the one `hack/images.sh path trainer` names for the current sources, or
TFLAUNCH_TRAINER_ARCHIVE. Without hack/images.sh these tests skip; with it but no archive they
skip outside CI and fail under CI=true."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import ROOT, ControlPlane, Run, eventually
from tests.node.conftest import NODE_NAME, REAL_NODE, node_sh

pytestmark = [pytest.mark.node, pytest.mark.slow]

KERAS_MNIST = ROOT / "examples" / "custom" / "keras_mnist.py"
TUTORIAL_LAYOUT = ROOT / "tests" / "data" / "tutorial_layout"
RESUMED = r"at step (?P<step>\d+) \(epoch \d+, step 0\)"


@pytest.fixture
def namespace(real_node: ControlPlane) -> Iterator[str]:
    name = f"mnist-{uuid.uuid4().hex[:5]}"
    real_node.kubectl("create", "namespace", name)
    yield name
    real_node.kubectl("delete", "namespace", name, "--wait=false", check=False)


def real_node_spec(path: Path, namespace: str, image: str, layout: str) -> Path:
    """examples/mnist.yaml as a user points it at the real node: a local image (never
    pulled), the node's label and taint, small requests (two workers share 2 cores), one
    short epoch."""
    document: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "mnist.yaml").read_text())
    document["metadata"]["namespace"] = namespace
    spec = document["spec"]
    spec.update(
        image=image,
        imagePullPolicy="Never",
        layout=layout,
        nodeSelector={REAL_NODE: "true"},
        tolerations=[{"key": REAL_NODE, "operator": "Exists", "effect": "NoSchedule"}],
        resources={
            "requests": {"cpu": "250m", "memory": "1Gi"},
            "limits": {"cpu": "2", "memory": "4Gi"},
        },
    )
    spec["trainer"].update(epochs=1, stepsPerEpoch=20)
    path.write_text(yaml.safe_dump(document))
    return path


def worker_lines(logs: Run, worker: int) -> list[str]:
    prefix = f"[worker {worker}] "
    return [line[len(prefix) :] for line in logs.out.splitlines() if line.startswith(prefix)]


def submit(real_node: ControlPlane, spec: Path) -> Run:
    return real_node.tflaunch(
        "submit", str(spec), "--workers", "2", "--wait", "--timeout", "15m", timeout=1000
    )


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("layout", ["indexed", "per-worker"])
def test_mnist_trains_on_two_workers_in_containers(
    real_node: ControlPlane, trainer_image: str, namespace: str, tmp_path: Path, layout: str
) -> None:
    spec = real_node_spec(tmp_path / "mnist.yaml", namespace, trainer_image, layout)

    run = submit(real_node, spec)

    assert run.code == 0, run
    assert "job mnist succeeded" in run.out + run.err, run
    status = real_node.tflaunch("status", "mnist", "-n", namespace, "-o", "json")
    assert status.code == 0, status
    job = json.loads(status.out)["status"]
    assert job["state"] == "Succeeded", status.out
    assert [(w["phase"], w["exitCode"]) for w in job["workers"]] == [("Succeeded", 0)] * 2
    assert {w["node"] for w in job["workers"]} == {NODE_NAME}, status.out
    progress = real_node.tflaunch("status", "mnist", "-n", namespace)
    assert "training: epoch 1/1, step 20/20, loss " in progress.out, progress
    logs = real_node.tflaunch("logs", "mnist", "-n", namespace)
    assert logs.code == 0, logs
    weights = []
    for worker in (0, 1):
        lines = worker_lines(logs, worker)
        assert any("plan: TrainingPlan(workers=2, replicas=2" in line for line in lines), logs.out
        assert any("epoch 1/1: loss=" in line for line in lines), logs.out
        weights += [line.split("weights sha256 ")[1] for line in lines if "weights sha256 " in line]
    assert len(weights) == 2 and weights[0] == weights[1], weights  # all-reduce kept them equal


def own_program_spec(path: Path, namespace: str, image: str, name: str, *args: str) -> Path:
    """real_node_spec for a job that runs the user's program with `args`: no built-in
    trainer section."""
    real_node_spec(path, namespace, image, "indexed")
    document = yaml.safe_load(path.read_text())
    document["metadata"]["name"] = name
    del document["spec"]["trainer"]
    document["spec"]["args"] = list(args)
    path.write_text(yaml.safe_dump(document))
    return path


def submit_script(real_node: ControlPlane, spec: Path, program: Path) -> Run:
    return real_node.tflaunch(
        "submit", str(spec), "--script", str(program), "--workers", "2", "--wait",
        "--timeout", "15m", timeout=1000,
    )  # fmt: skip


def succeeded_on_the_node(real_node: ControlPlane, namespace: str, name: str) -> None:
    status = real_node.tflaunch("status", name, "-n", namespace, "-o", "json")
    assert status.code == 0, status
    job = json.loads(status.out)["status"]
    assert job["state"] == "Succeeded", status.out
    assert [(w["phase"], w["exitCode"]) for w in job["workers"]] == [("Succeeded", 0)] * 2
    assert {w["node"] for w in job["workers"]} == {NODE_NAME}, status.out


@pytest.mark.timeout(1200)
def test_a_one_file_keras_program_trains_on_two_workers_in_containers(
    real_node: ControlPlane, trainer_image: str, namespace: str, tmp_path: Path
) -> None:
    spec = own_program_spec(
        tmp_path / "job.yaml", namespace, trainer_image, "keras-mnist",
        "--epochs", "1", "--steps-per-epoch", "20", "--data", "/opt/tflaunch/mnist.npz",
    )  # fmt: skip

    run = submit_script(real_node, spec, KERAS_MNIST)

    assert run.code == 0, run
    assert "job keras-mnist succeeded" in run.out + run.err, run
    succeeded_on_the_node(real_node, namespace, "keras-mnist")
    logs = real_node.tflaunch("logs", "keras-mnist", "-n", namespace)
    assert logs.code == 0, logs
    weights = []
    for worker in (0, 1):
        lines = worker_lines(logs, worker)
        assert "replicas in sync: 2" in lines, logs.out
        weights += [line.split("weights sha256 ")[1] for line in lines if "weights sha256 " in line]
    assert any(re.match(r"20/20 - .*loss: ", line) for line in worker_lines(logs, 0)), logs.out
    assert len(weights) == 2 and weights[0] == weights[1], weights  # all-reduce kept them equal


@pytest.mark.timeout(1200)
def test_the_two_file_tutorial_layout_trains_on_two_workers_in_containers(
    real_node: ControlPlane, trainer_image: str, namespace: str, tmp_path: Path
) -> None:
    """main.py imports mnist_setup.py: both travel in the job's ConfigMap and are importable
    side by side in every container."""
    spec = own_program_spec(
        tmp_path / "job.yaml", namespace, trainer_image, "tutorial",
        "--epochs", "2", "--steps-per-epoch", "8",
    )  # fmt: skip

    run = submit_script(real_node, spec, TUTORIAL_LAYOUT / "main.py")

    assert run.code == 0, run
    assert "job tutorial succeeded" in run.out + run.err, run
    succeeded_on_the_node(real_node, namespace, "tutorial")
    (config_map,) = real_node.get(
        "configmaps", "-n", namespace, "-l", "tflaunch.dev/job-name=tutorial"
    )["items"]
    pod = real_node.get("pods", "-n", namespace, "-l", "tflaunch.dev/job-name=tutorial")["items"][0]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "script")["configMap"]
    assert volume["name"] == config_map["metadata"]["name"]
    paths = {i["key"]: i["path"] for i in volume.get("items", [])}  # keys that cannot be paths
    carried = {paths.get(key, key): text for key, text in config_map["data"].items()}
    assert carried == {
        name: (TUTORIAL_LAYOUT / name).read_text() for name in ("main.py", "mnist_setup.py")
    }
    logs = real_node.tflaunch("logs", "tutorial", "-n", namespace)
    assert logs.code == 0, logs
    for worker in (0, 1):
        assert "replicas in sync: 2" in worker_lines(logs, worker), logs.out
    chief = worker_lines(logs, 0)
    assert "Epoch 2/2" in chief, logs.out
    assert any(re.match(r"8/8 \[=+\]", line) for line in chief), logs.out  # its progress bar


@pytest.mark.timeout(1200)
def test_restricted_pod_security_admits_the_workers_and_they_train(
    real_node: ControlPlane, trainer_image: str, namespace: str, tmp_path: Path
) -> None:
    real_node.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    spec = real_node_spec(tmp_path / "mnist.yaml", namespace, trainer_image, "indexed")

    run = submit(real_node, spec)

    assert run.code == 0, run
    pods = real_node.get("pods", "-n", namespace)["items"]
    assert [p["status"]["phase"] for p in pods] == ["Succeeded", "Succeeded"]
    for pod in pods:  # what the kubelet and runc enforced while TensorFlow ran
        container = pod["spec"]["containers"][0]["securityContext"]
        assert container["readOnlyRootFilesystem"] is True
        assert container["runAsNonRoot"] is True
        assert pod["spec"]["securityContext"]["runAsUser"] == 10001
        assert pod["spec"]["automountServiceAccountToken"] is False


@pytest.mark.timeout(900)
def test_a_worker_whose_peer_never_comes_up_exits_75_naming_it(
    real_node: ControlPlane, trainer_image: str, namespace: str, tmp_path: Path
) -> None:
    spec = real_node_spec(tmp_path / "mnist.yaml", namespace, trainer_image, "indexed")
    document = yaml.safe_load(spec.read_text())
    # 1.5 CPU each on a 2-CPU node: one worker runs, its peer stays Pending (no address, so
    # no DNS record under the headless Service).
    document["spec"]["resources"]["requests"]["cpu"] = "1500m"
    document["spec"]["trainer"]["rendezvousTimeoutSeconds"] = 20
    document["spec"]["backoffLimit"] = 0
    spec.write_text(yaml.safe_dump(document))

    run = real_node.tflaunch("submit", str(spec), timeout=120)

    assert run.code == 0, run

    pod = eventually(lambda: failed_pod(real_node, namespace), timeout=600, what="a worker to fail")
    exited_75_naming_its_peer(real_node, pod, namespace, seconds=20, in_place=True)


def failed_pod(cluster: ControlPlane, namespace: str) -> dict[str, Any] | None:
    """A pod of `namespace` that has failed, or None yet."""
    for pod in cluster.get("pods", "-n", namespace)["items"]:
        if pod["status"].get("phase") == "Failed":
            return dict(pod)
    return None


def exited_75_naming_its_peer(
    cluster: ControlPlane, pod: dict[str, Any], namespace: str, seconds: int, in_place: bool
) -> dict[str, Any]:
    """Check that worker `pod` of job mnist exited 75 (rendezvous) and its log names the
    peer it could not reach within `seconds` and why (its DNS name did not resolve): at the
    TensorFlow port, or at the control port (the first barrier) when the job restarts in
    place. Its terminated state."""
    state: dict[str, Any] = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["exitCode"] == 75, state
    index = 1 - int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
    host = f"mnist-worker-{index}.mnist.{namespace}.svc.cluster.local"
    log = cluster.kubectl("logs", pod["metadata"]["name"], "-n", namespace).out
    if in_place:
        said = f"peers worker {index} ({host}:2223, never answered: DNS: "
        assert said in log and f"never reached generation 0 within {seconds}s" in log, log
    else:
        assert f"peers never became reachable within {seconds}s: {host}:2222 (DNS: " in log, log
    return state


@pytest.fixture
def shared_claim(real_node: ControlPlane, namespace: str) -> Iterator[str]:
    """A PersistentVolumeClaim `checkpoints` on the node's disk (host_path_claim)."""
    yield from host_path_claim(real_node, namespace, "checkpoints")


def host_path_claim(real_node: ControlPlane, namespace: str, claim_name: str) -> Iterator[str]:
    """A PersistentVolumeClaim `claim_name` bound to a hostPath PersistentVolume on the
    node's disk (under its state directory, `volumes/NAMESPACE`), owned by the trainer's UID:
    the kubelet applies no fsGroup to hostPath volumes. The volume is deleted after."""
    path = Path(node_sh("state")) / "volumes" / namespace
    path.mkdir(parents=True)
    os.chown(path, 10001, 10001)
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": namespace},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(path), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": claim_name},
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim_name},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": namespace,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    real_node.apply(volume)
    real_node.apply(claim, namespace)
    yield claim_name
    real_node.kubectl("delete", "pv", namespace, "--wait=false", check=False)


def backup_saved(namespace: str) -> bool:
    """The chief's first epoch-end backup is on shared_claim's volume (its `checkpoint` index,
    which TensorFlow writes after the data). The epoch's log line comes first (the progress
    callback runs before the backup's), so a kill right after that line may find none."""
    volume = Path(node_sh("state")) / "volumes" / namespace
    return any(volume.glob("**/chief/checkpoint"))


def kill_worker_1_after_the_first_backup(cluster: ControlPlane, namespace: str) -> None:
    """Once the chief's first backup is on disk, SIGKILL worker 1's container through the
    node's containerd, as an OOM kill would (not a pod deletion: the pod stays)."""
    eventually(
        lambda: backup_saved(namespace), timeout=600, interval=1,
        what="the first epoch's checkpoint",
    )  # fmt: skip
    pod = cluster.kubectl(
        "get", "pods", "-n", namespace, "-l", "batch.kubernetes.io/job-completion-index=1",
        "-o", "jsonpath={.items[0].metadata.name}",
    ).out  # fmt: skip
    container = node_sh("crictl", "ps", "-q", "--label", f"io.kubernetes.pod.name={pod}")
    node_sh("crictl", "stop", "--timeout", "0", container)


@pytest.mark.timeout(1200)
def test_a_killed_worker_restarts_the_group_which_resumes_from_the_checkpoint(
    real_node: ControlPlane, trainer_image: str, namespace: str, shared_claim: str, tmp_path: Path
) -> None:
    spec = real_node_spec(tmp_path / "mnist.yaml", namespace, trainer_image, "indexed")
    document = yaml.safe_load(spec.read_text())
    document["spec"]["trainer"].update(epochs=4, stepsPerEpoch=150)
    document["spec"]["checkpoint"] = {"claimName": shared_claim}
    document["spec"]["restart"] = "recreate"  # the pods replaced (test_restart_in_place: kept)
    spec.write_text(yaml.safe_dump(document))
    assert real_node.tflaunch("submit", str(spec)).code == 0

    kill_worker_1_after_the_first_backup(real_node, namespace)

    wait = real_node.tflaunch("wait", "mnist", "-n", namespace, "--timeout", "15m", timeout=1000)

    assert wait.code == 0, wait
    status = json.loads(real_node.tflaunch("status", "mnist", "-n", namespace, "-o", "json").out)
    assert [w["restarts"] for w in status["status"]["workers"]] == [1, 1], status
    logs = real_node.tflaunch("logs", "mnist", "-n", namespace)
    for worker in (0, 1):
        lines = worker_lines(logs, worker)
        resumed = [re.search(RESUMED, line) for line in lines if "resuming from the backup" in line]
        assert len(resumed) == 1 and resumed[0] is not None, logs.out
        assert int(resumed[0]["step"]) >= 150, logs.out  # at an epoch's end, never from scratch


@pytest.mark.timeout(1200)
def test_an_evicted_worker_makes_every_worker_save_and_the_job_resume_without_a_retry(
    real_node: ControlPlane, trainer_image: str, namespace: str, shared_claim: str, tmp_path: Path
) -> None:
    spec = real_node_spec(tmp_path / "mnist.yaml", namespace, trainer_image, "indexed")
    document = yaml.safe_load(spec.read_text())
    document["spec"]["trainer"].update(epochs=3, stepsPerEpoch=150)
    document["spec"]["checkpoint"] = {"claimName": shared_claim}
    document["spec"]["backoffLimit"] = 0  # a preemption must not need a retry
    spec.write_text(yaml.safe_dump(document))
    assert real_node.tflaunch("submit", str(spec)).code == 0

    def training() -> bool:
        logs = real_node.tflaunch("logs", "mnist", "-n", namespace)
        return any("epoch 1/3: loss=" in line for line in worker_lines(logs, 0))

    eventually(training, timeout=600, interval=1, what="the first epoch")
    pod = real_node.kubectl(
        "get", "pods", "-n", namespace, "-l", "batch.kubernetes.io/job-completion-index=1",
        "-o", "jsonpath={.items[0].metadata.name}",
    ).out  # fmt: skip
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
    }
    # What a node drain does: the kubelet sends SIGTERM, then waits out the grace period.
    url = f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction"
    real_node.kubectl("create", "--raw", url, "-f", "-", stdin=json.dumps(eviction))

    wait = real_node.tflaunch("wait", "mnist", "-n", namespace, "--timeout", "15m", timeout=1000)

    assert wait.code == 0, wait
    status = json.loads(real_node.tflaunch("status", "mnist", "-n", namespace, "-o", "json").out)
    assert status["status"]["state"] == "Succeeded", status
    assert status["status"]["preemptions"] >= 1, status
    step = status["status"]["resumedAtStep"]
    assert step is not None and step > 150, status  # saved after the first epoch
    text = real_node.tflaunch("status", "mnist", "-n", namespace).out
    assert f"resumed at step {step}" in text and "preempted" in text, text


@pytest.mark.timeout(600)
def test_a_missing_image_ends_the_wait_with_exit_5_naming_it_in_well_under_two_minutes(
    real_node: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    spec = real_node_spec(tmp_path / "mnist.yaml", namespace, "tflaunch.dev/nosuch:1", "indexed")

    run = real_node.tflaunch(
        "submit", str(spec), "--workers", "2", "--wait", "--timeout", "10m", timeout=700
    )

    assert run.code == 5, run
    error = run.err.strip().splitlines()[-1]
    assert "will never start: image" in error and "nosuch:1" in error, run.err
    assert "ErrImageNeverPull" in error and "load the image into every node" in error, run.err
    assert "lacks room" not in run.err, run.err
    jobs = real_node.get("jobs", "-n", namespace)["items"]
    assert jobs, "the job's objects are left as they are"
