"""`tflaunch wait` / `submit --wait` against the real Job controller: success, a worker that
keeps failing past the backoff limit, a configuration error (exit 78) failing the Job at once
through our podFailurePolicy, and a control-plane outage in the middle of a wait."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.conftest import ControlPlane, pod_hooks

pytestmark = pytest.mark.e2e


def _condition(cp: ControlPlane, namespace: str, job: str, kind: str) -> dict[str, str] | None:
    conditions = cp.get("job", job, "-n", namespace)["status"].get("conditions") or []
    return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)


def test_wait_exits_0_when_every_worker_succeeds(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    run = control_plane.submit(
        tmp_path / "job.yaml", "ok", namespace, "--wait", "--timeout", "600", timeout=700,
        hooks=pod_hooks(run_for="2s"),
    )  # fmt: skip
    assert run.code == 0, run
    assert "job ok succeeded" in run.err
    assert _condition(control_plane, namespace, "ok-worker", "Complete")


def test_wait_exits_3_when_a_worker_keeps_failing_past_the_backoff_limit(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    run = cp.submit(
        tmp_path / "job.yaml", "flaky", namespace, "--wait", "--timeout", "600", timeout=700,
        backoffLimit=1, hooks=pod_hooks(run_for="1s", worker_exit={1: 1}),
    )  # fmt: skip
    assert run.code == 3, run
    failed = _condition(cp, namespace, "flaky-worker", "Failed")
    assert failed and failed["reason"] == "BackoffLimitExceeded"
    job = cp.get("job", "flaky-worker", "-n", namespace)
    # backoffLimit is per worker group: spec.backoffLimit x workers = 2 pod failures allowed.
    assert job["spec"]["backoffLimit"] == 2
    assert job["status"]["failed"] >= 3
    assert "worker 1" in run.err


def test_a_configuration_error_fails_the_job_at_once_without_retry(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    run = cp.submit(
        tmp_path / "job.yaml", "cfg", namespace, "--wait", "--timeout", "600", timeout=700,
        backoffLimit=6, hooks=pod_hooks(run_for="1s", worker_exit={1: 78}, exit_code=0),
    )  # fmt: skip
    assert run.code == 3, run
    failed = _condition(cp, namespace, "cfg-worker", "Failed")
    assert failed and failed["reason"] == "PodFailurePolicy", failed
    assert cp.get("job", "cfg-worker", "-n", namespace)["status"]["failed"] == 1
    assert "78" in run.err or "config" in run.err


def test_wait_rides_out_a_control_plane_restart(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    if not cp.owned:
        pytest.skip("restarts the API server: only on a cluster this session started")
    # The pods run until the test ends them (below), however slow the machine: wait must
    # see a running job, then the outage, then the end.
    run = cp.submit(tmp_path / "job.yaml", "outage", namespace, hooks=pod_hooks(run_for="forever"))
    assert run.code == 0, run
    waiter = cp.popen_tflaunch("wait", "outage", "-n", namespace, "--timeout", "240")
    assert waiter.stderr is not None
    seen: list[str] = []
    # Stop the server only once wait has talked to it: a server never reached is a
    # configuration error that fails at once, by design.
    first = waiter.stderr.readline()
    seen.append(first)
    assert first.startswith("outage: running"), first
    cp.wait_active(namespace, "outage-worker")
    cp.stop_apiserver()
    try:
        time.sleep(4)
        assert waiter.poll() is None, "wait must not give up while the API server is down"
    finally:
        cp.start_apiserver()  # also on failure: the next tests share this cluster
    # kwok's pod-end stage takes pods whose run-for is not "forever": they end in 1 s.
    cp.kubectl("annotate", "pods", "-n", namespace, "--all", "--overwrite",
               "kwok.tflaunch.dev/run-for=1s")  # fmt: skip
    out, rest = waiter.communicate(timeout=240)
    err = "".join(seen) + rest
    assert waiter.returncode == 0, f"exit {waiter.returncode}\n{out}\n{err}"
    assert "unavailable" in err
    assert _condition(cp, namespace, "outage-worker", "Complete")
