"""A preempted worker (exit 79: every worker saved at the same step) on the real control
plane: the Job replaces the pod without counting it toward backoffLimit (podFailurePolicy
Ignore), and the operator records a preemption instead of restarting the group.

kwok runs no containers: the exit code 79 comes from the pod-hook annotation
kwok.tflaunch.dev/exit-code-1, on every pod of worker 1 (each replacement too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ControlPlane, eventually, pod_hooks
from tests.e2e.test_operator import Operator, _mwj, _status, operator  # noqa: F401

pytestmark = pytest.mark.e2e


def _worker_pods(cp: ControlPlane, namespace: str, index: int) -> list[dict[str, Any]]:
    pods = cp.get("pods", "-n", namespace)["items"]
    return [
        p
        for p in pods
        if p["metadata"].get("annotations", {}).get("batch.kubernetes.io/job-completion-index")
        == str(index)
    ]


def _exit_codes(pods: list[dict[str, Any]]) -> list[int]:
    codes = []
    for pod in pods:
        for status in pod.get("status", {}).get("containerStatuses") or ():
            terminated = (status.get("state") or {}).get("terminated")
            if terminated:
                codes.append(int(terminated["exitCode"]))
    return codes


def test_a_pod_that_exits_79_is_replaced_without_moving_the_job_toward_its_backoff_limit(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    run = cp.submit(
        tmp_path / "job.yaml", "pre", namespace,
        backoffLimit=0, hooks=pod_hooks(run_for="2s", worker_exit={1: 79}),
    )  # fmt: skip
    assert run.code == 0, run
    # backoffLimit 0 (x2 workers = 0 for the indexed Job): one counted failure would fail it.
    preempted = eventually(
        lambda: (codes := _exit_codes(_worker_pods(cp, namespace, 1))).count(79) >= 2 and codes,
        what="worker 1 preempted twice (its pod replaced after the first)",
        timeout=120,
    )
    assert set(preempted) == {79}
    job = cp.get("job", "pre-worker", "-n", namespace)
    assert job["status"].get("failed", 0) == 0, job["status"]
    conditions = {c["type"]: c["status"] for c in job["status"].get("conditions") or ()}
    assert conditions.get("Failed") != "True" and conditions.get("FailureTarget") != "True"


def test_the_operator_records_a_preemption_and_restarts_nothing(
    control_plane: ControlPlane,
    operator: Operator,  # noqa: F811
    namespace: str,
) -> None:
    cp = control_plane
    hooks = pod_hooks(run_for="3s", worker_exit={1: 79})
    cp.apply(_mwj("preempted", namespace, hooks, backoffLimit=0, terminationGracePeriodSeconds=1))
    status = eventually(
        lambda: (s := _status(cp, "preempted", namespace)).get("preemptions", 0) >= 1 and s,
        what="a preemption in the MultiWorkerJob's status",
        timeout=120,
    )
    assert status.get("restarts", 0) == 0, status
    assert status["phase"] not in ("Failed", "Restarting"), status
    assert status.get("lastPreemptionTime"), status
    job = cp.get("job", "preempted-worker", "-n", namespace)
    assert job["status"].get("failed", 0) == 0, job["status"]
    events = cp.get("events", "-n", namespace, "--field-selector", "involvedObject.name=preempted")
    assert "Preempted" in {e["reason"] for e in events["items"]}
    # Worker 1 keeps being preempted (the hook is on every pod of it); it is never a restart.
    later = eventually(
        lambda: (s := _status(cp, "preempted", namespace)).get("preemptions", 0) >= 2 and s,
        what="a second preemption",
        timeout=120,
    )
    assert later.get("restarts", 0) == 0 and later["phase"] not in ("Failed", "Restarting")
