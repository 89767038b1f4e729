"""status, list, doctor, logs and delete against the real API server, scheduler and garbage
collector. kwok runs no containers, so `logs` is covered only where it needs none."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import ControlPlane, eventually, pod_hooks, write_spec

pytestmark = pytest.mark.e2e


def test_status_shows_the_schedulers_reason_when_no_node_has_the_gpus(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "big", namespace, gpusPerWorker=8)
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run

    def unschedulable() -> str | None:
        status = cp.tflaunch("status", "big", "-n", namespace)
        assert status.code == 0, status
        return status.out if "Insufficient nvidia.com/gpu" in status.out else None

    out = eventually(unschedulable, what="the scheduler's Unschedulable message in status")
    assert "Unschedulable" in out
    assert "0/3 nodes are available" in out


def test_list_shows_the_job_and_doctor_checks_the_gpu_nodes(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    fits = write_spec(
        tmp_path / "fits.yaml", "fits", namespace, gpusPerWorker=4,
        hooks=pod_hooks(run_for="forever"),
    )  # fmt: skip
    assert (run := cp.tflaunch("submit", str(fits))).code == 0, run
    try:
        _list_and_doctor(cp, namespace, fits, tmp_path)
    finally:
        # Its pods hold every GPU of the control plane, which later tests on this xdist
        # worker share: free them before the next test, not when the namespace goes.
        cp.kubectl(
            "delete", "job", "fits-worker", "-n", namespace, "--cascade=foreground",
            "--wait=true", "--timeout=120s", check=False,
        )  # fmt: skip


def _list_and_doctor(cp: ControlPlane, namespace: str, fits: Path, tmp_path: Path) -> None:
    listed = cp.tflaunch("list", "-n", namespace)
    assert listed.code == 0, listed
    assert "fits" in listed.out

    doctor = cp.tflaunch("doctor", "-f", str(fits), "-n", namespace)
    assert doctor.code == 0, doctor
    assert "✓ GPU nodes: 2 of 3 nodes have allocatable nvidia.com/gpu" in doctor.out, doctor

    cp.wait_active(namespace, "fits-worker")
    live = cp.tflaunch("doctor", "fits", "-n", namespace)
    assert live.code == 0, live
    # The TF_CONFIG each pod really got, and the EndpointSlice controller's endpoints.
    assert "✓ TF_CONFIG" in live.out, live
    assert "✓ Service endpoints" in live.out, live

    too_big = write_spec(tmp_path / "big.yaml", "toobig", namespace, workers=4, gpusPerWorker=4)
    doctor = cp.tflaunch("doctor", "-f", str(too_big), "-n", namespace)
    assert doctor.code != 0, doctor
    assert "✗" in doctor.out, doctor


def test_logs_of_a_pod_without_a_container_log_is_one_line(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    # No ClusterLogs for this namespace, so kwok's kubelet server has no log to give: the API
    # server's error is what a user sees for a pod whose node cannot serve its log. It must
    # be one line, not a traceback.
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "nolog", namespace, hooks=pod_hooks(run_for="forever"))
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run
    cp.wait_active(namespace, "nolog-worker")
    logs = cp.tflaunch("logs", "nolog", "-n", namespace, "--worker", "0")
    assert "Traceback" not in logs.err
    assert logs.err.strip(), logs
    assert len(logs.err.strip().splitlines()) <= 2, logs


def test_delete_removes_everything_through_the_garbage_collector_and_is_idempotent(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "gone", namespace, hooks=pod_hooks(run_for="forever"))
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run
    eventually(lambda: len(cp.get("pods", "-n", namespace)["items"]) == 2, what="both worker pods")
    deleted = cp.tflaunch("delete", "gone", "-n", namespace)
    assert deleted.code == 0, deleted  # 134 was the SIGABRT of issue 8
    assert "job.batch/gone-worker deleted" in deleted.out
    left = cp.get("jobs,pods,services,networkpolicies", "-n", namespace)["items"]
    assert left == [], [f"{o['kind']}/{o['metadata']['name']}" for o in left]

    again = cp.tflaunch("delete", "gone", "-n", namespace)
    assert again.code == 0, again
    assert "nothing to delete" in again.out
