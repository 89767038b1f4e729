"""`logs` on the real API server when a pod is deleted between listing and reading it: the
server answers 404 for that pod's log, and tflaunch skips the pod with a note instead of
ending. In-process, because only here can the deletion fall exactly between the two calls
(kwok serves no container logs, so the pods still there cannot be read anyway)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cluster import find, logs
from launcher.cluster.client import connect
from tests.e2e.conftest import ControlPlane, eventually, pod_hooks, write_spec

pytestmark = pytest.mark.e2e


def test_a_pod_deleted_between_listing_and_reading_its_log_is_a_note(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "gone", namespace, hooks=pod_hooks(run_for="forever"))
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run
    cp.wait_active(namespace, "gone-worker")
    cluster = connect(str(cp.kubeconfig))
    try:
        listed = find.job_objects(cluster, "gone", namespace).pods
        (first,) = [p for p in listed if p["metadata"]["name"].startswith("gone-worker-0-")]
        pod = first["metadata"]["name"]
        # The Job controller's tracking finalizer would hold a pod kwok never terminates.
        unfinalize = '[{"op":"remove","path":"/metadata/finalizers"}]'
        cp.kubectl("patch", "pod", pod, "-n", namespace, "--type", "json", "-p", unfinalize)
        cp.kubectl("delete", "pod", pod, "-n", namespace, "--grace-period=0", "--force")
        eventually(
            lambda: cp.kubectl("get", "pod", pod, "-n", namespace, check=False).code != 0,
            what=f"pod {pod} gone",
        )

        lines = list(logs.pods_logs(cluster, [first], namespace))
    finally:
        cluster.close()

    assert [(line.index, line.pod, line.text) for line in lines] == [(0, pod, None)]
    assert lines[0].note == f"pod {pod} was deleted before its log was read; skipped"
