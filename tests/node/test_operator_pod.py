"""The operator as users run it: the operator image built here (hack/images.sh), `helm install`
of charts/tflaunch-operator, and the operator running as the chart's Deployment pods on the
real node, under the chart's ServiceAccount and RBAC, in a namespace that enforces the
restricted Pod Security level. It reaches the API server through the kubernetes Service
(kube-proxy on the node). A MultiWorkerJob applied with kubectl then trains in containers to
Succeeded with its result in status, and a worker whose container is killed makes the
operator restart the group once (status.restarts == 1), which resumes from its checkpoint.

One release serves the whole module (each real training costs about a minute here); the
chart's only changes from its defaults are the ones a user of a tainted node makes: the
operator's pods select and tolerate the real node, and the tenancy lists allow jobs to."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher import __version__
from launcher.api.identity import GROUP, PLURAL
from tests.e2e.conftest import ROOT, ControlPlane, eventually
from tests.e2e.test_chart_install import CHART, _helm_binary
from tests.node import jobs as mnist
from tests.node import test_restart_in_place as in_place_test
from tests.node.conftest import NODE_NAME, REAL_NODE, built_archive, node_sh
from tests.node.jobs import kill_worker_1_after_the_first_backup, real_node_spec, worker_lines

pytestmark = [pytest.mark.node, pytest.mark.slow]

OPERATOR = "tflaunch-operator"

# tests/node/jobs.py's fixtures: a namespace, a shared volume.
namespace = mnist.namespace
shared_claim = mnist.shared_claim


def helm(cp: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [_helm_binary(), *args, "--kubeconfig", str(cp.kubeconfig)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


def operator_pods(cp: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/name={OPERATOR}"
    pods: list[dict[str, Any]] = cp.get("pods", "-n", namespace, "-l", selector)["items"]
    return pods


def user_values(path: Path) -> Path:
    """What a user of a tainted node writes in a values file."""
    toleration = {"key": REAL_NODE, "operator": "Exists", "effect": "NoSchedule"}
    path.write_text(
        yaml.safe_dump(
            {
                "nodeSelector": {REAL_NODE: "true"},
                "tolerations": [toleration],
                "tenancy": {
                    "tolerationKeys": [REAL_NODE],
                    "nodeLabelKeys": ["kubernetes.io/os", REAL_NODE],
                },
            }
        )
    )
    return path


def install(cp: ControlPlane, system: str, values: Path, *sets: str, verb: str = "install") -> None:
    """`helm install` (or `verb`, e.g. `upgrade --install`) of the release with `values` and
    `--set` each of `sets`; it returns once the operator's pods are Ready."""
    flags = [arg for value in sets for arg in ("--set", value)]
    helm(
        cp, *verb.split(), OPERATOR, str(CHART), "--namespace", system, "--values", str(values),
        *flags, "--wait", "--timeout", "5m",
    )  # fmt: skip


@pytest.fixture(scope="module")
def release(real_node: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`helm install` of the chart into a restricted namespace; the operator's pods Ready on
    the real node. Yields the release namespace."""
    cp = real_node
    node_sh("import", str(built_archive("operator")), timeout=900)
    system = f"tflaunch-system-{uuid.uuid4().hex[:5]}"
    cp.kubectl("create", "namespace", system)
    cp.kubectl("label", "namespace", system, "pod-security.kubernetes.io/enforce=restricted")
    install(cp, system, user_values(tmp_path_factory.mktemp("operator") / "values.yaml"))
    try:
        yield system
    finally:
        subprocess.run(
            [_helm_binary(), "uninstall", OPERATOR, "--namespace", system,
             "--kubeconfig", str(cp.kubeconfig)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        cp.kubectl("delete", "namespace", system, "--wait=false", check=False)


def multiworkerjob(path: Path, namespace: str, image: str, **trainer: Any) -> dict[str, Any]:
    real_node_spec(path, namespace, image, "indexed")
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    document["spec"]["trainer"].update(trainer)
    return document


def script_multiworkerjob(path: Path, namespace: str, image: str, source: str) -> dict[str, Any]:
    """A MultiWorkerJob that runs a program of the user's own (`spec.script`), not MNIST."""
    document = multiworkerjob(path, namespace, image)
    document["spec"].pop("trainer")
    document["spec"]["script"] = {"name": "train.py", "source": source}
    return document


def mwj_status(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    status: dict[str, Any] = cp.get("mwj", "mnist", "-n", namespace).get("status") or {}
    return status


def phase(cp: ControlPlane, namespace: str, name: str, wanted: str) -> Any:
    def check() -> dict[str, Any] | None:
        status: dict[str, Any] = cp.get("mwj", name, "-n", namespace).get("status") or {}
        assert status.get("phase") != "Failed", status
        return status if status.get("phase") == wanted else None

    return check


def operator_log(cp: ControlPlane, system: str) -> str:
    logs = [
        cp.kubectl("logs", p["metadata"]["name"], "-n", system, check=False).out
        for p in operator_pods(cp, system)
    ]
    return "\n".join(logs)


def succeeded(cp: ControlPlane, namespace: str, release: str, restarts: int, what: str) -> None:
    """Wait for the MultiWorkerJob mnist to succeed, with `restarts` group restarts and the
    chief's result in its status (read back by the operator's pod)."""
    status = eventually(
        phase(cp, namespace, "mnist", "Succeeded"), timeout=900, interval=2, what=what
    )
    assert status.get("restarts", 0) == restarts, (status, operator_log(cp, release))
    assert status["result"], status


@pytest.mark.timeout(1200)
def test_the_operator_runs_as_the_charts_pods_and_trains_a_multiworkerjob_to_succeeded(
    real_node: ControlPlane, release: str, trainer_image: str, namespace: str, tmp_path: Path
) -> None:
    cp = real_node
    pods = operator_pods(cp, release)
    assert len(pods) == 2, pods  # the chart's two replicas: one leads, one waits
    for pod in pods:
        assert pod["spec"]["nodeName"] == NODE_NAME
        assert pod["spec"]["serviceAccountName"] == OPERATOR
        assert pod["spec"]["containers"][0]["image"] == f"tflaunch-operator:{__version__}"
        assert pod["status"]["containerStatuses"][0]["ready"] is True, pod["status"]

    cp.apply(multiworkerjob(tmp_path / "mwj.yaml", namespace, trainer_image))

    succeeded(cp, namespace, release, restarts=0, what="the MultiWorkerJob Succeeded")
    workers = cp.get("pods", "-n", namespace, "-l", "tflaunch.dev/job-name=mnist")["items"]
    assert [(p["spec"]["nodeName"], p["status"]["phase"]) for p in workers] == [
        (NODE_NAME, "Succeeded")
    ] * 2
    lease = cp.get("lease", OPERATOR, "-n", release)["spec"]["holderIdentity"]
    assert any(lease.startswith(p["metadata"]["name"]) for p in pods), (lease, pods)
    logs = cp.tflaunch("logs", "mnist", "-n", namespace)
    for worker in (0, 1):
        assert any("epoch 1/1: loss=" in line for line in worker_lines(logs, worker)), logs.out


@pytest.mark.timeout(1200)
def test_a_killed_worker_makes_the_operator_pod_restart_the_group_once(
    real_node: ControlPlane,
    release: str,
    trainer_image: str,
    namespace: str,
    shared_claim: str,
    tmp_path: Path,
) -> None:
    cp = real_node
    document = multiworkerjob(
        tmp_path / "mwj.yaml", namespace, trainer_image, epochs=3, stepsPerEpoch=150
    )
    document["spec"].update(checkpoint={"claimName": shared_claim}, restart="recreate")
    cp.apply(document)

    kill_worker_1_after_the_first_backup(cp, namespace)

    succeeded(
        cp, namespace, release, restarts=1, what="the MultiWorkerJob Succeeded after the kill"
    )
    logs = cp.tflaunch("logs", "mnist", "-n", namespace)
    resumed = [line for line in worker_lines(logs, 0) if "resuming from the backup" in line]
    assert len(resumed) == 1, logs.out
    status_json = json.loads(cp.tflaunch("status", "mnist", "-n", namespace, "-o", "json").out)
    assert status_json["status"]["operator"]["restarts"] == 1, status_json


@pytest.mark.timeout(1200)
def test_an_in_place_multiworkerjob_restarts_in_the_same_pods_and_the_operator_counts_it(
    real_node: ControlPlane,
    release: str,
    trainer_image: str,
    namespace: str,
    shared_claim: str,
    tmp_path: Path,
) -> None:
    """spec.restart inPlace under the operator's pod: the program inside worker 1's container
    SIGKILLed -> the wrappers restart the group in the same pods; the operator counts it from
    the chief's log (status.restarts 1, status.lastRestartInPlace, one RestartedInPlace
    event) and records the success."""
    cp = real_node
    document = multiworkerjob(
        tmp_path / "mwj.yaml", namespace, trainer_image, epochs=3, stepsPerEpoch=150
    )
    document["spec"].update(checkpoint={"claimName": shared_claim}, restart="inPlace")
    cp.apply(document)
    eventually(
        lambda: mnist.backup_saved(namespace), timeout=600, interval=1,
        what="the first epoch's checkpoint",
    )  # fmt: skip
    before = {p["metadata"]["uid"]: p for p in cp.get("pods", "-n", namespace)["items"]}
    (worker_1,) = [
        p["metadata"]["name"]
        for p in before.values()
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "1"
    ]

    os.kill(in_place_test.program_of(worker_1), signal.SIGKILL)

    succeeded(cp, namespace, release, restarts=1, what="the MultiWorkerJob Succeeded in place")
    after = {p["metadata"]["uid"]: p for p in cp.get("pods", "-n", namespace)["items"]}
    assert set(after) == set(before), "a pod was replaced"
    assert all(
        c["restartCount"] == 0 for p in after.values() for c in p["status"]["containerStatuses"]
    ), after
    status = cp.get("mwj", "mnist", "-n", namespace)["status"]
    assert status["lastRestartInPlace"].startswith(
        "restart in place 1: worker 1 was killed by SIGKILL"
    ), status
    events = cp.get("events", "-n", namespace)["items"]
    in_place = [e["message"] for e in events if e["reason"] == "RestartedInPlace"]
    assert len(in_place) == 1 and in_place[0].startswith("restart in place 1: worker 1"), in_place
    summary = cp.tflaunch("status", "mnist", "-n", namespace)
    assert "last restart in place 1: worker 1 was killed by SIGKILL" in summary.out, summary


FORGING_PROGRAM = """
import os, sys, time
index = os.environ["TFLAUNCH_WORKER_INDEX"]
if index == "1":  # a worker that is not the chief prints markers at the start of its lines
    time.sleep(2)
    print('TFLAUNCH_PROGRESS {"epoch": 9, "epochs": 9, "step": 9, "steps": 9}', flush=True)
    print('TFLAUNCH_RESULT {"test_accuracy": 1.0, "forged": "by worker 1"}', flush=True)
    sys.exit(0)
print('TFLAUNCH_PROGRESS {"epoch": 1, "epochs": 1, "step": 4, "steps": 4}', flush=True)
print('TFLAUNCH_RESULT {"test_accuracy": 0.5}', flush=True)
# Untrusted text the chief logs after its own result: a marker glued mid-line.
print('request from client: TFLAUNCH_RESULT {"test_accuracy": 1.0, "forged": "mid-line"}')
print('INFO:root:TFLAUNCH_PROGRESS {"epoch": 7, "epochs": 7, "step": 7, "steps": 7}', flush=True)
time.sleep(45)  # running past the operator's next look at the chief's progress (30 s)
"""


@pytest.mark.timeout(600)
def test_only_the_chiefs_own_result_line_reaches_the_multiworkerjobs_status(
    real_node: ControlPlane, release: str, trainer_image: str, namespace: str, tmp_path: Path
) -> None:
    """Forged lines on real pods (issue 40): worker 1 prints result and progress markers at the
    start of its lines, the chief glues them mid-line after its own; the operator's pod keeps
    the chief's own result and progress, and `tflaunch status` shows the same."""
    cp = real_node
    cp.apply(
        script_multiworkerjob(tmp_path / "mwj.yaml", namespace, trainer_image, FORGING_PROGRAM)
    )

    def progress() -> dict[str, Any] | None:
        return mwj_status(cp, namespace).get("progress")

    read = eventually(progress, timeout=240, interval=2, what="the chief's progress in status")
    assert (read["epoch"], read["step"]) == (1, 4), read
    status = eventually(
        phase(cp, namespace, "mnist", "Succeeded"), timeout=300, interval=2,
        what="the forging MultiWorkerJob Succeeded",
    )  # fmt: skip
    assert status["result"] == {"test_accuracy": 0.5}, status
    assert (status["progress"]["epoch"], status["progress"]["step"]) == (1, 4), status
    shown = json.loads(cp.tflaunch("status", "mnist", "-n", namespace, "-o", "json").out)
    assert shown["status"]["operator"]["result"] == {"test_accuracy": 0.5}, shown
    logs = cp.tflaunch("logs", "mnist", "-n", namespace)
    assert any("forged" in line for line in worker_lines(logs, 1)), logs.out  # it did print


@pytest.mark.timeout(1200)
def test_a_save_only_the_chief_makes_fails_the_multiworkerjob_once_without_a_restart(
    real_node: ControlPlane, release: str, trainer_image: str, namespace: str, tmp_path: Path
) -> None:
    """A program of the user's own (`spec.script`) in real containers: worker 1 finishes, the
    chief fails in its save's collectives (TensorFlow's UnavailableError, carried by the
    wrapper's termination message through the kubelet), and the operator's pod reads the
    programs' divergence: Failed, reason ProgramsDiverged, no restart; the warning it gave
    at creation is an event."""
    cp = real_node
    source = (ROOT / "tests" / "data" / "chief_only_save.py").read_text()
    cp.apply(script_multiworkerjob(tmp_path / "mwj.yaml", namespace, trainer_image, source))

    def failed() -> dict[str, Any] | None:
        status = mwj_status(cp, namespace)
        return status if status.get("phase") == "Failed" else None

    status = eventually(failed, timeout=600, interval=2, what="the MultiWorkerJob Failed")
    assert status["reason"] == "ProgramsDiverged", (status, operator_log(cp, release))
    assert status.get("restarts", 0) == 0, status
    assert status["message"].startswith(
        "worker 0 failed in a collective operation (UnavailableError) after worker 1 had "
        "finished the program (exit 0)"
    ), status["message"]
    events = cp.get("events", "-n", namespace)["items"]
    warnings = [e["message"] for e in events if e["reason"] == "ProgramWarning"]
    assert [w.split(":")[0] for w in warnings] == ["only the chief saves (train.py"], warnings
    waited = cp.tflaunch("wait", "mnist", "-n", namespace, "--timeout", "60s")
    assert waited.code == 3, waited.out + waited.err
    assert "ProgramsDiverged" in waited.err or "failed in a collective" in waited.err, waited.err


def leader(cp: ControlPlane, system: str) -> str:
    holder: str = cp.get("lease", OPERATOR, "-n", system)["spec"].get("holderIdentity") or ""
    return holder


@pytest.mark.timeout(1200)
def test_the_leader_pod_killed_then_a_helm_upgrade_leave_a_training_job_alone(
    real_node: ControlPlane, release: str, trainer_image: str, namespace: str, tmp_path: Path
) -> None:
    """While a job trains: the leader's pod is deleted (the other replica takes the Lease),
    then `helm upgrade` with a changed value rolls both pods. The job neither restarts nor
    fails, and the operator that ends up leading records its success."""
    cp = real_node
    cp.apply(
        multiworkerjob(tmp_path / "mwj.yaml", namespace, trainer_image, epochs=3, stepsPerEpoch=150)
    )
    eventually(phase(cp, namespace, "mnist", "Running"), timeout=600, what="the job Running")
    first = leader(cp, release)
    (killed,) = [p for p in operator_pods(cp, release) if first.startswith(p["metadata"]["name"])]
    standby = {p["metadata"]["name"] for p in operator_pods(cp, release)} - {
        killed["metadata"]["name"]
    }

    cp.kubectl("delete", "pod", killed["metadata"]["name"], "-n", release)

    taken = eventually(
        lambda: next((n for n in standby if leader(cp, release).startswith(n)), None),
        timeout=120, what="the standby replica leading",
    )  # fmt: skip
    before = {p["metadata"]["name"] for p in operator_pods(cp, release)}
    helm(
        cp, "upgrade", OPERATOR, str(CHART), "--namespace", release, "--reuse-values",
        "--set", "resources.limits.memory=320Mi", "--wait", "--timeout", "5m",
    )  # fmt: skip
    succeeded(cp, namespace, release, restarts=0, what="the MultiWorkerJob Succeeded")
    after = [p for p in operator_pods(cp, release) if not p["metadata"].get("deletionTimestamp")]
    assert {p["metadata"]["name"] for p in after}.isdisjoint(before | {taken}), after
    limits = [p["spec"]["containers"][0]["resources"]["limits"]["memory"] for p in after]
    assert limits == ["320Mi", "320Mi"], limits


def terminating(cp: ControlPlane, system: str) -> list[str]:
    """The operator's pods being deleted (a rollout's old ones: `helm --wait` does not wait)."""
    pods = operator_pods(cp, system)
    return [p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")]


def job_uids(cp: ControlPlane, namespace: str, name: str) -> dict[str, str]:
    jobs = cp.get("jobs", "-n", namespace, "-l", f"tflaunch.dev/job-name={name}")["items"]
    return {j["metadata"]["name"]: j["metadata"]["uid"] for j in jobs}


@pytest.mark.timeout(1500)
def test_helm_uninstall_leaves_a_training_job_and_a_namespaced_reinstall_finishes_it(
    real_node: ControlPlane, release: str, trainer_image: str, namespace: str, tmp_path: Path
) -> None:
    """docs/operator.md, Uninstalling: `helm uninstall` while a job trains removes only the
    operator (its pods, ServiceAccount, RBAC); the CRD, the MultiWorkerJob, its Jobs and its
    running pods stay, and nobody writes its status. The operator is then installed again
    namespaced (`watch.allNamespaces=false`, serving the job's namespace only): it adopts the
    job's Jobs as they are (same uids, no restart) and records its success, while a
    MultiWorkerJob in a namespace it does not serve gets no status and no Jobs. One training
    run for both; the module's cluster-wide release is restored at the end."""
    cp = real_node
    values = user_values(tmp_path / "values.yaml")
    other = f"other-{uuid.uuid4().hex[:5]}"
    cp.kubectl("create", "namespace", other)
    try:
        cp.apply(
            multiworkerjob(
                tmp_path / "mwj.yaml", namespace, trainer_image, epochs=8, stepsPerEpoch=200
            )
        )  # long enough to outlive the uninstall (3 x 150 steps did not)
        eventually(phase(cp, namespace, "mnist", "Running"), timeout=600, what="the job Running")
        jobs = job_uids(cp, namespace, "mnist")
        assert jobs, "no Jobs"

        helm(cp, "uninstall", OPERATOR, "--namespace", release, "--wait", "--timeout", "5m")
        workers = cp.get("pods", "-n", namespace, "-l", "tflaunch.dev/job-name=mnist")["items"]
        assert [p["status"]["phase"] for p in workers] == ["Running"] * 2, workers
        eventually(lambda: not operator_pods(cp, release), timeout=300, what="no operator pod")

        assert cp.kubectl("get", "crd", f"{PLURAL}.{GROUP}", check=False).code == 0
        for gone in ("deployment", "serviceaccount", "clusterrolebinding", "clusterrole"):
            found = cp.kubectl("get", gone, OPERATOR, "-n", release, "--ignore-not-found")
            assert not found.out.strip(), f"{gone} {OPERATOR} left by helm uninstall"
        status = cp.get("mwj", "mnist", "-n", namespace)["status"]
        assert status["phase"] == "Running", status  # as the operator last wrote it
        assert job_uids(cp, namespace, "mnist") == jobs
        assert {p["metadata"]["uid"] for p in workers} == {
            p["metadata"]["uid"]
            for p in cp.get("pods", "-n", namespace, "-l", "tflaunch.dev/job-name=mnist")["items"]
        }  # the same pods, left alone
        theirs = multiworkerjob(tmp_path / "theirs.yaml", other, trainer_image)
        theirs["metadata"]["name"] = "theirs"
        cp.apply(theirs)

        served = f"watch.namespaces={{{namespace}}}"
        install(cp, release, values, "watch.allNamespaces=false", served)

        found = cp.kubectl("get", "clusterrolebinding", OPERATOR, "--ignore-not-found")
        assert not found.out.strip(), "a namespaced release granted something cluster-wide"
        assert (
            cp.get("rolebinding", OPERATOR, "-n", namespace)["subjects"][0]["namespace"] == release
        )
        succeeded(
            cp, namespace, release, restarts=0,
            what="the MultiWorkerJob Succeeded under the reinstalled operator",
        )  # fmt: skip
        assert job_uids(cp, namespace, "mnist") == jobs  # adopted, not recreated
        assert not cp.get("mwj", "theirs", "-n", other).get("status"), "another namespace's job"
        assert job_uids(cp, other, "theirs") == {}
    finally:
        cp.kubectl("delete", "mwj", "theirs", "-n", other, "--ignore-not-found", check=False)
        cp.kubectl("delete", "namespace", other, "--wait=false", check=False)
        install(cp, release, values, verb="upgrade --install")  # the module's release again
        eventually(lambda: not terminating(cp, release), timeout=300, what="old operator pods gone")
