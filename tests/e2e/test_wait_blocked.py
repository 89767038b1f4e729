"""`tflaunch wait` on the real API server when workers never get a pod: a ResourceQuota
refuses their creation (the Job controller records FailedCreate events, no pod is Pending),
and `wait` says so with the server's own message instead of waiting in silence."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import ControlPlane, eventually, pod_hooks, write_spec

pytestmark = pytest.mark.e2e


def _quota(namespace: str, pods: int) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "few-pods", "namespace": namespace},
        "spec": {"hard": {"pods": str(pods)}},
    }


def test_wait_warns_when_a_quota_keeps_workers_from_being_created(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    cp.apply(_quota(namespace, 1), namespace)
    eventually(
        lambda: cp.get("resourcequota", "few-pods", "-n", namespace).get("status", {}).get("hard"),
        what="the quota controller to count the namespace",
    )
    spec = write_spec(tmp_path / "job.yaml", "quota", namespace, hooks=pod_hooks(run_for="forever"))
    run = cp.tflaunch(
        "submit", str(spec), "--wait", "--timeout", "25", "--pending-warning", "2", timeout=90
    )
    assert run.code == 4, run  # a timeout: the job keeps waiting for its second worker
    # On a loaded machine the admitted worker may also be reported Pending for a while;
    # what matters is the one warning about the worker that never got a pod.
    warnings = [line for line in run.err.splitlines() if "exceeded quota" in line]
    assert len(warnings) == 1, run
    assert warnings[0].startswith("warning:"), run
    assert "1 of 2" in warnings[0], run
    assert "exceeded quota: few-pods" in warnings[0], run


def test_wait_does_not_warn_about_a_suspended_job(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(
        tmp_path / "job.yaml", "held", namespace, suspend=True, hooks=pod_hooks(run_for="forever")
    )
    run = cp.tflaunch(
        "submit", str(spec), "--wait", "--timeout", "6", "--pending-warning", "1", timeout=60
    )
    assert run.code == 4, run
    assert "warning:" not in run.err, run


def test_a_checkpoint_claim_that_does_not_exist_ends_the_wait_with_5_naming_it(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """The real scheduler leaves such a pod Pending for ever ("persistentvolumeclaim ... not
    found"), and `wait` gave capacity advice: no node will ever fit it, so it is a dead end."""
    cp = control_plane
    spec = write_spec(
        tmp_path / "job.yaml", "noclaim", namespace, hooks=pod_hooks(run_for="forever"),
        checkpoint={"claimName": "nosuch"},
    )  # fmt: skip
    run = cp.tflaunch("submit", str(spec), "--wait", "--timeout", "240", timeout=300)
    assert run.code == 5, run
    last = run.err.strip().splitlines()[-1]
    assert 'will never start: PersistentVolumeClaim "nosuch" (Unschedulable' in last, run
    assert "correct spec.checkpoint.claimName" in last, run
    assert "Insufficient" not in run.err and "add nodes" not in run.err, run
