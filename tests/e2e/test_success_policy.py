"""spec.successPolicy chief on the real API server: the Job controller ends the indexed Job
once worker 0's pod succeeds (its successPolicy names index 0), stops the worker still
running, and `tflaunch status`/`wait` read the job as Succeeded; under allWorkers the same
pod status leaves the job running."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ControlPlane, eventually, pod_hooks

pytestmark = pytest.mark.e2e


def _pod(cp: ControlPlane, namespace: str, job: str, index: int) -> dict[str, Any] | None:
    pods = cp.get("pods", "-n", namespace, "-l", f"tflaunch.dev/job-name={job}")["items"]
    found: dict[str, Any] | None = next(
        (
            p
            for p in pods
            if p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index")
            == str(index)
            and p["status"].get("phase") == "Running"
        ),
        None,
    )
    return found


def _worker_0_exits_0(cp: ControlPlane, namespace: str, job: str) -> None:
    """Write what a kubelet writes when worker 0's trainer exits 0 (kwok runs no container)."""
    pod = eventually(lambda: _pod(cp, namespace, job, 0), what="worker 0 Running")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    ended = {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
    status = {
        "phase": "Succeeded",
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "PodCompleted"},
            {"type": "ContainersReady", "status": "False", "reason": "PodCompleted"},
        ],
        "containerStatuses": [
            {
                "name": "trainer",
                "image": pod["spec"]["containers"][0]["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": ended},
            }
        ],
    }
    cp.kubectl(
        "patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip


def _state(cp: ControlPlane, namespace: str, job: str) -> str:
    run = cp.tflaunch("status", job, "-n", namespace, "-o", "json")
    assert run.code == 0, run.err
    return str(json.loads(run.out)["status"]["state"])


def test_under_chief_worker_0s_success_ends_the_job_and_stops_the_other(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    run = cp.submit(
        tmp_path / "chief.yaml", "chief", namespace,
        hooks=pod_hooks(run_for="forever"), successPolicy="chief", backoffLimit=0,
    )  # fmt: skip
    assert run.code == 0, run.err
    eventually(lambda: _pod(cp, namespace, "chief", 1), what="worker 1 Running")
    _worker_0_exits_0(cp, namespace, "chief")
    wait = cp.tflaunch("wait", "chief", "-n", namespace, "--timeout", "90", timeout=120)
    assert wait.code == 0, wait.err
    assert _state(cp, namespace, "chief") == "Succeeded"  # from SuccessCriteriaMet on

    def conditions() -> set[str]:
        job = cp.get("job", "chief-worker", "-n", namespace)
        return {c["type"] for c in job["status"]["conditions"] if c["status"] == "True"}

    # Complete once the Job controller has stopped worker 1.
    eventually(lambda: {"SuccessCriteriaMet", "Complete"} <= conditions(), what="Complete")
    assert _pod(cp, namespace, "chief", 1) is None
    assert _state(cp, namespace, "chief") == "Succeeded"


def test_under_all_workers_worker_0s_success_leaves_the_job_running(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    run = cp.submit(
        tmp_path / "all.yaml", "all", namespace, hooks=pod_hooks(run_for="forever"),
        backoffLimit=0,
    )  # fmt: skip
    assert run.code == 0, run.err
    eventually(lambda: _pod(cp, namespace, "all", 1), what="worker 1 Running")
    _worker_0_exits_0(cp, namespace, "all")
    eventually(
        lambda: cp.get("job", "all-worker", "-n", namespace)["status"].get("succeeded") == 1,
        what="the Job counting worker 0's success",
    )
    assert _state(cp, namespace, "all") not in ("Succeeded", "Failed")
    assert _pod(cp, namespace, "all", 1) is not None
