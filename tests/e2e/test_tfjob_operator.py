"""`kubectl apply -f tfjob.yaml` under the operator, on the real control plane: the chart
with tfjob.enabled installs the kubeflow.org TFJob CRD (none was installed) and runs the
operator with --tfjobs all, with the chart's RBAC. A Chief + Worker TFJob becomes a
MultiWorkerJob of its name that the TFJob owns, restarts as a group when its chief fails
once, runs to Succeeded, and the TFJob shows the
conditions and replicaStatuses a TFJob user reads; `tflaunch status/wait/logs/delete` work on
its name. A TFJob managed by another controller is left alone; one tflaunch cannot run is
Failed naming the field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ControlPlane, cri_log_line, eventually, pod_hooks
from tests.e2e.test_chart_install import Release, run_operator  # noqa: F401 (a fixture)

pytestmark = pytest.mark.e2e


def _tfjob(
    name: str, namespace: str, hooks: dict[str, str] | None = None, **run_policy: Any
) -> dict[str, Any]:
    template = {
        "metadata": {"annotations": hooks or pod_hooks(run_for="3s")},
        "spec": {
            "containers": [
                {
                    "name": "tensorflow",
                    "image": "tflaunch-trainer:e2e",
                    "command": ["python", "/multi_worker_strategy-with-keras.py"],
                    "ports": [{"name": "tfjob-port", "containerPort": 2222}],
                }
            ]
        },
    }
    replica = {"replicas": 1, "restartPolicy": "OnFailure", "template": template}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None", **run_policy},
            "tfReplicaSpecs": {"Chief": copy.deepcopy(replica), "Worker": replica},
        },
    }


CHIEF_FAILS_ONCE = pod_hooks(run_for="3s", worker_exit={0: 1}, fail_once=True)


def _tfjob_status(cp: ControlPlane, name: str, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = cp.get("tfjob", name, "-n", namespace).get("status") or {}
    return found


def _state(cp: ControlPlane, name: str, namespace: str) -> str | None:
    conditions = _tfjob_status(cp, name, namespace).get("conditions") or []
    return str(conditions[-1]["type"]) if conditions else None


def test_a_tfjob_applied_with_kubectl_runs_under_the_operator(
    control_plane: ControlPlane,
    namespace: str,
    run_operator: Any,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    cp = control_plane
    release = Release(cp, namespace, "tfjob.enabled=true", "replicaCount=1",
                      "leaderElection=false")  # fmt: skip
    cp.wait_established("tfjobs.kubeflow.org")
    args = release.deployment_args()
    assert args[args.index("--tfjobs") + 1] == "all"
    log = tmp_path / "chief.log"
    log.write_text(cri_log_line("chief here"))
    cp.serve_logs(namespace, log)
    run_operator(release)
    cp.apply(
        [
            # The chief fails once (the worker's exit 0 decides nothing): the group restarts.
            _tfjob("tfj", namespace, CHIEF_FAILS_ONCE),
            _tfjob("theirs", namespace, managedBy="kubeflow.org/training-operator"),
        ]
    )
    bad = _tfjob("with-ps", namespace)
    bad["spec"]["tfReplicaSpecs"]["PS"] = copy.deepcopy(bad["spec"]["tfReplicaSpecs"]["Worker"])
    cp.apply(bad)

    eventually(lambda: _state(cp, "tfj", namespace) == "Succeeded", what="TFJob Succeeded",
               timeout=120)  # fmt: skip
    status = _tfjob_status(cp, "tfj", namespace)
    replicas = status["replicaStatuses"]
    assert replicas["Chief"] == {"active": 0, "succeeded": 1, "failed": 0}
    # successPolicy (default): the chief decided; the worker ended with it or was stopped.
    assert replicas["Worker"]["failed"] == 0
    true = {c["type"] for c in status["conditions"] if c["status"] == "True"}
    assert {"Created", "Succeeded"} <= true and "Failed" not in true
    assert "Restarting" in {c["type"] for c in status["conditions"]}  # it was, then not
    assert cp.get("multiworkerjob", "tfj", "-n", namespace)["status"]["restarts"] == 1
    assert status["completionTime"]
    listed = cp.kubectl("get", "tfjobs", "-n", namespace).out
    assert any(line.split()[:2] == ["tfj", "Succeeded"] for line in listed.splitlines()), listed
    child = cp.get("multiworkerjob", "tfj", "-n", namespace)
    (owner,) = child["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], child["spec"]["successPolicy"]) == (
        "TFJob",
        "tfj",
        "chief",
    )
    # No request the TFJob did not write, as under `tflaunch submit`: the stored child keeps
    # `requests: {}` (the CRD defaults an absent one to 1 CPU and 2Gi), and so do its Jobs.
    assert child["spec"]["resources"] == {"requests": {}, "limits": {}}, child["spec"]
    for job in cp.get("jobs", "-n", namespace, "-l", "tflaunch.dev/job-name=tfj")["items"]:
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert not container.get("resources"), container

    status_run = cp.tflaunch("status", "tfj", "-n", namespace)
    assert status_run.code == 0 and "Succeeded" in status_run.out, status_run
    assert cp.tflaunch("wait", "tfj", "-n", namespace, "--timeout", "30").code == 0
    logs = cp.tflaunch("logs", "tfj", "-n", namespace)
    assert logs.code == 0 and "chief here" in logs.out, logs

    failed = eventually(
        lambda: _state(cp, "with-ps", namespace) == "Failed", what="the PS TFJob Failed"
    )
    assert failed
    (condition,) = _tfjob_status(cp, "with-ps", namespace)["conditions"]
    assert condition["reason"] == "InvalidSpec"
    assert condition["message"].startswith("spec.tfReplicaSpecs.PS: ")
    assert cp.kubectl("get", "multiworkerjob", "with-ps", "-n", namespace, check=False).code != 0

    # Left to its controller: seen by now (the other two were served), never touched.
    assert _tfjob_status(cp, "theirs", namespace) == {}
    assert cp.kubectl("get", "multiworkerjob", "theirs", "-n", namespace, check=False).code != 0

    deleted = cp.tflaunch("delete", "tfj", "-n", namespace, "--timeout", "60")
    assert deleted.code == 0 and "tfjob.kubeflow.org/tfj deleted" in deleted.out, deleted
    eventually(
        lambda: cp.kubectl("get", "tfjob", "tfj", "-n", namespace, check=False).code != 0,
        what="the TFJob gone",
    )
    assert cp.kubectl("get", "multiworkerjob", "tfj", "-n", namespace, check=False).code != 0
    release.run("uninstall", release.name)
