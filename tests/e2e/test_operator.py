"""The operator on the real control plane: the CRD applied with kubectl, `tflaunch operator`
running as a process with the token of the ServiceAccount from manifests/operator/ (bound by
its ClusterRole, not admin), MultiWorkerJobs applied with kubectl, the real Job controller and
garbage collector doing the rest."""

from __future__ import annotations

import copy
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import ROOT, ControlPlane, eventually, pod_hooks, stop_process

pytestmark = pytest.mark.e2e

OPERATOR_NS = "tflaunch-system"
SERVICE_ACCOUNT = "tflaunch-operator"


def _operator_manifests() -> list[dict[str, Any]]:
    """RBAC, ServiceAccount and the metrics Service as shipped (the server accepts it; no pod
    backs it); the Deployment's container cannot run on kwok."""
    docs = yaml.safe_load_all((ROOT / "manifests/operator/operator.yaml").read_text())
    return [d for d in docs if d and d["kind"] not in {"Deployment", "NetworkPolicy"}]


def install_operator(cp: ControlPlane, home: Path) -> Path:
    """The CRD and the operator's RBAC as shipped; the kubeconfig of its ServiceAccount."""
    cp.install_crd()
    cp.apply(_operator_manifests())
    return cp.account_kubeconfig(SERVICE_ACCOUNT, OPERATOR_NS, home / "kubeconfig")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Operator:
    def __init__(self, kubeconfig: Path, log: Path, *extra: str) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log
        self._log = log.open("w")
        self.metrics_url = f"http://127.0.0.1:{_free_port()}/metrics"
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "launcher", "operator", "-A", "--liveness", "",
             "--metrics-address", self.metrics_url.split("/")[2], "--kubeconfig", str(kubeconfig),
             *extra],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
        )  # fmt: skip

    def log(self) -> str:
        return self.log_path.read_text()

    def serving_metrics(self) -> bool:
        try:
            self.metric("tflaunch_multiworkerjobs", phase="Running")
        except OSError:
            return False
        return True

    def metric(self, name: str, **labels: str) -> float:
        """One sample of the operator's /metrics, scraped now as Prometheus would (0 if absent)."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return 0.0

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()


@pytest.fixture(scope="module")
def operator(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    home = tmp_path_factory.mktemp("operator")
    running = Operator(install_operator(control_plane, home), home / "operator.log")
    try:
        yield running
    finally:
        running.stop()


def _mwj(name: str, namespace: str, hooks: dict[str, str], **spec: Any) -> dict[str, Any]:
    example = yaml.safe_load((ROOT / "examples/mnist.yaml").read_text())
    doc = copy.deepcopy(example)
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"].update(spec)
    doc["spec"]["annotations"] = hooks
    return doc


def _status(cp: ControlPlane, name: str, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = cp.get("mwj", name, "-n", namespace).get("status") or {}
    return found


def _phase_is(cp: ControlPlane, name: str, namespace: str, phase: str) -> Any:
    def check() -> Any:
        status = _status(cp, name, namespace)
        return status if status.get("phase") == phase else None

    return check


def test_a_multiworkerjob_applied_with_kubectl_runs_to_succeeded(
    control_plane: ControlPlane, operator: Operator, namespace: str
) -> None:
    cp = control_plane
    cp.apply(_mwj("ok", namespace, pod_hooks(run_for="3s")))
    jobs = eventually(
        lambda: cp.get("jobs", "-n", namespace)["items"], what="the operator's Jobs",
        timeout=60,
    )  # fmt: skip
    mwj_uid = cp.get("mwj", "ok", "-n", namespace)["metadata"]["uid"]
    for obj in [*jobs, cp.get("service", "ok", "-n", namespace)]:
        owners = obj["metadata"]["ownerReferences"]
        assert [(o["kind"], o["uid"], o.get("controller")) for o in owners] == [
            ("MultiWorkerJob", mwj_uid, True)
        ]
    status = eventually(
        _phase_is(cp, "ok", namespace, "Succeeded"), what="phase Succeeded", timeout=90
    )
    assert status.get("restarts", 0) == 0


def test_a_failed_worker_restarts_the_whole_group_once(
    control_plane: ControlPlane, operator: Operator, namespace: str
) -> None:
    cp = control_plane
    restarts = "tflaunch_group_restarts_total"
    eventually(operator.serving_metrics, what="the operator's /metrics", timeout=30)
    assert operator.metric(restarts, namespace=namespace) == 0
    hooks = pod_hooks(run_for="2s", worker_exit={1: 1}, fail_once=True)
    cp.apply(_mwj("again", namespace, hooks, backoffLimit=2))
    status = eventually(
        _phase_is(cp, "again", namespace, "Succeeded"), what="Succeeded after a restart",
        timeout=120,
    )  # fmt: skip
    assert status["restarts"] == 1, status
    assert operator.metric(restarts, namespace=namespace) == 1  # scraped: the counter moved
    assert operator.metric("tflaunch_reconcile_duration_seconds_count") > 0
    job = cp.get("jobs", "-n", namespace)["items"][0]
    env = {
        e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TFLAUNCH_RESTARTS"] == "1"


def test_a_configuration_error_fails_the_multiworkerjob_without_restart(
    control_plane: ControlPlane, operator: Operator, namespace: str
) -> None:
    cp = control_plane
    cp.apply(_mwj("cfg", namespace, pod_hooks(run_for="1s", worker_exit={0: 78})))
    status = eventually(_phase_is(cp, "cfg", namespace, "Failed"), what="Failed", timeout=90)
    reasons = {c.get("reason") for c in status.get("conditions", [])}
    assert "ConfigError" in reasons, status
    assert status.get("restarts", 0) == 0


def test_deleting_the_multiworkerjob_collects_every_child(
    control_plane: ControlPlane, operator: Operator, namespace: str
) -> None:
    cp = control_plane
    cp.apply(_mwj("bye", namespace, pod_hooks(run_for="forever")))
    eventually(
        lambda: len(cp.get("pods", "-n", namespace)["items"]) == 2, what="both workers",
        timeout=60,
    )  # fmt: skip
    cp.kubectl("delete", "mwj", "bye", "-n", namespace, "--wait=true", "--timeout=60s")
    eventually(
        lambda: not cp.get("jobs,pods,services,networkpolicies", "-n", namespace)["items"],
        what="the garbage collector removing every child", timeout=60,
    )  # fmt: skip


def test_the_operators_service_account_cannot_leave_its_cluster_role(
    control_plane: ControlPlane, operator: Operator
) -> None:
    cp = control_plane
    as_operator = ["--kubeconfig", str(operator.kubeconfig)]
    allowed = cp.kubectl(*as_operator, "get", "jobs", "-A", check=False)
    assert allowed.code == 0, allowed
    for verb in (("get", "secrets", "-A"), ("get", "configmaps", "-n", "default")):
        denied = cp.kubectl(*as_operator, *verb, check=False)
        assert denied.code != 0 and "forbidden" in denied.err.lower(), denied


def test_a_foreign_service_with_the_jobs_name_fails_it_with_name_conflict_and_no_restart(
    control_plane: ControlPlane, operator: Operator, namespace: str
) -> None:
    cp = control_plane
    foreign = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "taken", "namespace": namespace},
        "spec": {"clusterIP": "None", "selector": {"app": "someone-else"}, "ports": [{"port": 80}]},
    }
    cp.apply(foreign)
    cp.apply(_mwj("taken", namespace, pod_hooks(run_for="forever")))

    status = eventually(_phase_is(cp, "taken", namespace, "Failed"), what="Failed", timeout=60)
    reasons = {c.get("reason") for c in status.get("conditions", [])}
    assert "NameConflict" in reasons, status
    assert "Service taken" in status.get("message", ""), status
    assert status.get("restarts", 0) == 0
    service = cp.get("service", "taken", "-n", namespace)
    assert service["spec"]["selector"] == {"app": "someone-else"}, "never adopted"
    assert not service["metadata"].get("ownerReferences")
    assert not cp.get("jobs", "-n", namespace)["items"], "no worker group may start"
    assert operator.metric("tflaunch_api_errors_total", code="409") >= 1  # the taken name
    assert operator.metric("tflaunch_multiworkerjobs", phase="Failed") >= 1
    events = eventually(
        lambda: [
            e
            for e in cp.get("events", "-n", namespace)["items"]
            if e["reason"] == "NameConflict" and e["involvedObject"]["name"] == "taken"
        ],
        what="a NameConflict event on the MultiWorkerJob",
    )
    assert events[0]["type"] == "Warning"


def test_the_operator_stores_a_multiworkerjobs_script_in_a_config_map_it_owns(
    control_plane: ControlPlane, operator: Operator, namespace: str
) -> None:
    cp = control_plane
    source = "import os\nprint('mine', os.environ['TFLAUNCH_NUM_WORKERS'])\n"
    doc = _mwj("own", namespace, pod_hooks(run_for="1h"))
    doc["spec"].pop("trainer")
    # 3 workers: the built-in trainer's batch rule (256 over 3 replicas) does not bind it.
    doc["spec"].update(
        script={"name": "train.py", "source": source}, args=["--epochs", "1"], workers=3
    )
    cp.apply(doc)
    config_maps = eventually(
        lambda: cp.get("configmaps", "-n", namespace, "-l", "tflaunch.dev/job-name=own")["items"],
        what="the operator's ConfigMap", timeout=60,
    )  # fmt: skip
    (config_map,) = config_maps
    assert config_map["data"] == {"train.py": source}
    mwj_uid = cp.get("mwj", "own", "-n", namespace)["metadata"]["uid"]
    owners = config_map["metadata"]["ownerReferences"]
    assert [(o["kind"], o["uid"]) for o in owners] == [("MultiWorkerJob", mwj_uid)]
    (job,) = eventually(
        lambda: cp.get("jobs", "-n", namespace)["items"], what="the operator's Job", timeout=60
    )
    pod = job["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "script")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--") + 1 :] == [
        "python", "/opt/tflaunch/script/train.py", "--epochs", "1",
    ]  # fmt: skip
    eventually(_phase_is(cp, "own", namespace, "Running"), what="phase Running", timeout=90)
    # The program creates no strategy: what `tflaunch submit` would warn of, `kubectl apply`
    # gets as a Warning event on the resource.
    (warning,) = eventually(
        lambda: [
            e
            for e in cp.get("events", "-n", namespace)["items"]
            if e["reason"] == "ProgramWarning" and e["involvedObject"]["name"] == "own"
        ],
        what="a ProgramWarning event on the MultiWorkerJob",
    )
    assert warning["type"] == "Warning"
    assert warning["message"].startswith(
        "no file of the program creates tf.distribute.MultiWorkerMirroredStrategy: each of "
        "the 3 workers would train its own copy"
    ), warning["message"]
