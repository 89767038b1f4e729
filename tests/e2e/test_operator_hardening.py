"""The operator against what the outside review (issue 27) did to it, on the real control plane:
a GPU job on kwok's GPU nodes, a foreign Job with the workers' name, pods the quota refuses,
children deleted or orphaned while the group runs, and a chief whose log is too big to read
whole. One operator process (the module's fixture) serves every test, as in test_operator."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import ControlPlane, eventually, pod_hooks
from tests.e2e.test_operator import Operator, _mwj, _phase_is
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
    cp.apply(_mwj("g1", namespace, pod_hooks(run_for="3s"), gpusPerWorker=1))
    status = eventually(
        _phase_is(cp, "g1", namespace, "Succeeded"), what="phase Succeeded", timeout=120
    )
    assert status.get("restarts", 0) == 0, status
    (job,) = cp.get("jobs", "-n", namespace)["items"]
    limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1", limits
    nodes = {p["spec"]["nodeName"] for p in _worker_pods(cp, namespace, "g1")}
    assert nodes and nodes <= {"kwok-gpu-0", "kwok-gpu-1"}, nodes
    assert "ValidationError" not in operator.log()
