"""`logs` on the real API server: the workers' lines as kwok's kubelet server serves them
(`ControlPlane.serve_logs`), and a pod deleted between listing and reading it, for which the
server answers 404 and tflaunch skips the pod with a note instead of ending. That one runs
in-process, because only there can the deletion fall exactly between the two calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cluster import find, logs
from launcher.cluster.client import connect
from tests.e2e.conftest import ControlPlane, cri_log_line, eventually, pod_hooks, write_spec

pytestmark = pytest.mark.e2e


def test_logs_prints_every_workers_lines_prefixed_with_its_index(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    log_file = tmp_path / "trainer.log"
    log_file.write_text(cri_log_line("preflight ok") + cri_log_line("epoch 1/1 done"))
    cp.serve_logs(namespace, log_file)
    spec = write_spec(tmp_path / "job.yaml", "say", namespace, hooks=pod_hooks(run_for="forever"))
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run
    cp.wait_active(namespace, "say-worker")

    every = cp.tflaunch("logs", "say", "-n", namespace)
    assert every.code == 0, every
    lines = every.out.splitlines()
    for index in (0, 1):
        assert [line for line in lines if line.startswith(f"[worker {index}]")] == [
            f"[worker {index}] preflight ok",
            f"[worker {index}] epoch 1/1 done",
        ], every
    one = cp.tflaunch("logs", "say", "-n", namespace, "--worker", "1")
    assert one.code == 0, one
    assert one.out.splitlines() == ["[worker 1] preflight ok", "[worker 1] epoch 1/1 done"], one


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
