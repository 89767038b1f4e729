"""The operator against what the outside review (issue 27) did to it, on the real control plane:
a GPU job on kwok's GPU nodes, a foreign Job with the workers' name, pods the quota refuses,
children deleted or orphaned while the group runs, and a chief whose log is too big to read
whole. One operator process (the module's fixture) serves every test, as in test_operator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.core import contract
from tests.e2e.conftest import ControlPlane, cri_log_line, eventually, pod_hooks, write_spec
from tests.e2e.test_operator import Operator, _mwj, _phase_is, _status
from tests.e2e.test_operator import operator as operator  # the module-scoped fixture, one here

pytestmark = pytest.mark.e2e


def _worker_pods(cp: ControlPlane, namespace: str, job: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = cp.get(
        "pods", "-n", namespace, "-l", f"tflaunch.dev/job-name={job}"
    )["items"]
    return found


def test_a_gpu_multiworkerjob_runs_on_the_gpu_nodes_to_succeeded(
    control_plane: ControlPlane, operator: Operator, namespace: str
) -> None:
    cp = control_plane
    # The first test of the module: the operator process may still be starting (a loaded
    # CI machine took over 120 s once), so wait for it before timing the job.
    eventually(operator.serving_metrics, what="the operator's /metrics", timeout=180)
    gpu = {"gpusPerWorker": 1, "image": "tflaunch-trainer:0.1.0"}  # the GPU build
    cp.apply(_mwj("g1", namespace, pod_hooks(run_for="3s"), **gpu))
    try:
        status = eventually(
            _phase_is(cp, "g1", namespace, "Succeeded"), what="phase Succeeded", timeout=180
        )
    except AssertionError as e:
        pods = [
            (p["metadata"]["name"], p["status"].get("phase"), p["spec"].get("nodeName"))
            for p in _worker_pods(cp, namespace, "g1")
        ]
        raise AssertionError(
            f"{e}\npods: {pods}\noperator log (tail):\n{operator.log()[-3000:]}"
        ) from None
    assert status.get("restarts", 0) == 0, status
    (job,) = cp.get("jobs", "-n", namespace)["items"]
    limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1", limits
    nodes = {p["spec"]["nodeName"] for p in _worker_pods(cp, namespace, "g1")}
    assert nodes and nodes <= {"kwok-gpu-0", "kwok-gpu-1"}, nodes
    assert "ValidationError" not in operator.log()


def test_submit_replace_of_a_gpu_job_replaces_it(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "g.yaml", "g2", namespace, hooks=pod_hooks(run_for="forever"))
    assert (first := cp.tflaunch("submit", str(spec), "--gpus", "1")).code == 0, first
    old = cp.get("job", "g2-worker", "-n", namespace)["metadata"]["uid"]

    run = cp.tflaunch("submit", str(spec), "--gpus", "1", "--replace", timeout=300)

    assert run.code == 0, run
    job = cp.get("job", "g2-worker", "-n", namespace)
    assert job["metadata"]["uid"] != old
    limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1", limits
    # Free the GPUs for the later tests on this control plane (the namespace goes lazily).
    cp.kubectl(
        "delete", "job", "g2-worker", "-n", namespace, "--cascade=foreground",
        "--wait=true", "--timeout=120s", check=False,
    )  # fmt: skip


def test_a_foreign_job_with_the_workers_name_fails_it_with_name_conflict(
    control_plane: ControlPlane, operator: Operator, namespace: str
) -> None:
    cp = control_plane
    foreign = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "mine-worker", "namespace": namespace},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "someone-else:1"}],
                }
            },
        },
    }
    cp.apply(foreign)
    cp.apply(_mwj("mine", namespace, pod_hooks(run_for="forever")))

    status = eventually(_phase_is(cp, "mine", namespace, "Failed"), what="Failed", timeout=90)
    reasons = {c.get("reason") for c in status.get("conditions", [])}
    assert "NameConflict" in reasons, status
    assert "Job mine-worker" in status.get("message", ""), status
    job = cp.get("job", "mine-worker", "-n", namespace)
    assert not job["metadata"].get("ownerReferences"), "never adopted"
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "someone-else:1"


def test_pods_a_quota_refuses_are_reported_in_the_status_and_by_wait(
    control_plane: ControlPlane, operator: Operator, namespace: str
) -> None:
    cp = control_plane
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "small", "namespace": namespace},
        "spec": {"hard": {"pods": "0"}},
    }
    cp.apply(quota)
    eventually(
        lambda: cp.get("resourcequota", "small", "-n", namespace).get("status", {}).get("hard"),
        what="the quota controller to count the namespace",
    )
    cp.apply(_mwj("quota", namespace, pod_hooks(run_for="forever")))

    def blocked() -> Any:
        status = _status(cp, "quota", namespace)
        return status if status.get("reason") == "PodsNotCreated" else None

    status = eventually(blocked, what="reason PodsNotCreated", timeout=120)
    assert "exceeded quota: small" in status["message"], status
    assert "quota-worker" in status["message"], status
    run = cp.tflaunch("wait", "quota", "-n", namespace, "--timeout", "5", timeout=90)
    assert run.code == 4, run
    warnings = [line for line in run.err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "exceeded quota: small" in warnings[0], run


def test_a_service_or_network_policy_deleted_while_the_group_runs_is_restored(
    control_plane: ControlPlane, operator: Operator, namespace: str
) -> None:
    cp = control_plane
    cp.apply(_mwj("keep", namespace, pod_hooks(run_for="forever")))
    eventually(_phase_is(cp, "keep", namespace, "Running"), what="Running", timeout=120)
    uid = cp.get("mwj", "keep", "-n", namespace)["metadata"]["uid"]
    before = {
        kind: cp.get(kind, name, "-n", namespace)["metadata"]["uid"]
        for kind, name in (("service", "keep"), ("networkpolicy", "keep-tf-peers"))
    }

    cp.kubectl("delete", "service", "keep", "-n", namespace)
    cp.kubectl("delete", "networkpolicy", "keep-tf-peers", "-n", namespace)

    for kind, name in (("service", "keep"), ("networkpolicy", "keep-tf-peers")):

        def restored(kind: str = kind, name: str = name) -> Any:
            run = cp.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
            if run.code != 0:
                return None
            found = json.loads(run.out)
            return found if found["metadata"]["uid"] != before[kind] else None

        found = eventually(restored, what=f"{kind} {name} created again", timeout=90)
        owners = found["metadata"]["ownerReferences"]
        assert [(o["kind"], o["uid"]) for o in owners] == [("MultiWorkerJob", uid)]
    policy = cp.get("networkpolicy", "keep-tf-peers", "-n", namespace)
    assert policy["spec"]["podSelector"]["matchLabels"]["tflaunch.dev/job-name"] == "keep"
    eventually(
        lambda: [
            e
            for e in cp.get("events", "-n", namespace)["items"]
            if e["reason"] == "Restored" and e["involvedObject"]["name"] == "keep"
        ],
        what="a Restored event on the MultiWorkerJob",
    )


def test_orphaned_pods_keep_the_operator_from_starting_a_second_group_beside_them(
    control_plane: ControlPlane, operator: Operator, namespace: str
) -> None:
    cp = control_plane
    cp.apply(_mwj("uo", namespace, pod_hooks(run_for="forever")))
    eventually(_phase_is(cp, "uo", namespace, "Running"), what="Running", timeout=120)
    old_pods = sorted(p["metadata"]["name"] for p in _worker_pods(cp, namespace, "uo"))
    assert len(old_pods) == 2

    cp.kubectl("delete", "job", "uo-worker", "-n", namespace, "--cascade=orphan")

    def waiting() -> Any:
        status = _status(cp, "uo", namespace)
        return status if status.get("reason") == "OrphanedPods" else None

    status = eventually(waiting, what="reason OrphanedPods", timeout=120)
    assert all(p in status["message"] for p in old_pods), status
    # the status that says so was written by the decision not to create the Job
    assert not cp.get("jobs", "-n", namespace)["items"]
    assert sorted(p["metadata"]["name"] for p in _worker_pods(cp, namespace, "uo")) == old_pods

    cp.kubectl("delete", "pods", "-n", namespace, "-l", "tflaunch.dev/job-name=uo", "--wait=true")
    eventually(_phase_is(cp, "uo", namespace, "Running"), what="Running again", timeout=120)
    pods = _worker_pods(cp, namespace, "uo")
    assert len(pods) == 2 and not {p["metadata"]["name"] for p in pods} & set(old_pods)


def test_resubmit_refuses_while_orphaned_pods_of_the_job_run(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "o.yaml", "co", namespace, hooks=pod_hooks(run_for="forever"))
    assert (first := cp.tflaunch("submit", str(spec))).code == 0, first
    eventually(lambda: len(_worker_pods(cp, namespace, "co")) == 2, what="both workers")
    cp.kubectl("delete", "job", "co-worker", "-n", namespace, "--cascade=orphan")
    eventually(lambda: not cp.get("jobs", "-n", namespace)["items"], what="the Job gone, pods left")

    run = cp.tflaunch("submit", str(spec))

    assert run.code == 2, run
    assert "run without their Job" in run.err and "nothing was applied" in run.err, run
    assert len(run.err.strip().splitlines()) == 1, run
    assert not cp.get("jobs", "-n", namespace)["items"]
    replaced = cp.tflaunch("submit", str(spec), "--replace", timeout=300)
    assert replaced.code == 0, replaced
    eventually(lambda: len(_worker_pods(cp, namespace, "co")) == 2, what="the new workers")


def _memory_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_a_chief_log_of_huge_lines_costs_the_operator_no_more_than_its_bound(
    control_plane: ControlPlane, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    log_file = tmp_path / "trainer.log"
    huge = "x" * (5 * 1024 * 1024)
    with log_file.open("w") as log:
        for _ in range(20):  # 100 MB in the chief's last 200 lines
            log.write(cri_log_line(huge))
        log.write(cri_log_line(contract.RESULT_LINE_PREFIX + json.dumps({"test_accuracy": 0.5})))
    cp.serve_logs(namespace, log_file)
    eventually(operator.serving_metrics, what="the operator started", timeout=60)
    before = _memory_kib(operator.process.pid, "VmHWM")  # its peak so far

    cp.apply(_mwj("big", namespace, pod_hooks(run_for="3s")))

    done = eventually(_phase_is(cp, "big", namespace, "Succeeded"), what="Succeeded", timeout=180)
    assert done.get("result", {}).get("test_accuracy") == 0.5, done  # the last line is read
    grown = _memory_kib(operator.process.pid, "VmHWM") - before
    assert grown < 32 * 1024, f"the operator's peak memory grew by {grown} KiB"


def test_a_result_line_nested_deeper_than_python_can_parse_does_not_stop_success(
    control_plane: ControlPlane, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    log_file = tmp_path / "trainer.log"
    deep = '{"a": ' * 50_000 + "1" + "}" * 50_000
    log_file.write_text(cri_log_line(contract.RESULT_LINE_PREFIX + deep))
    cp.serve_logs(namespace, log_file)

    cp.apply(_mwj("deep", namespace, pod_hooks(run_for="3s")))

    done = eventually(_phase_is(cp, "deep", namespace, "Succeeded"), what="Succeeded", timeout=120)
    assert not done.get("result"), done
    assert "RecursionError" not in operator.log()
