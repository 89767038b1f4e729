"""A submit that fails midway on the real API server (issue 27 item 16) says what it wrote
and that running it again converges, and running it again does.

The failure is made deterministic with a ResourceQuota on the number of Jobs: each Job
alone passes the server's dry-run (quota admission checks one object at a time), so every
check passes and the writes start; the server then refuses the Job past the quota, as it
would answer nothing once it dies midway."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import ControlPlane, pod_hooks, write_spec

pytestmark = pytest.mark.e2e


def _quota(cp: ControlPlane, namespace: str, jobs: int) -> None:
    cp.apply(
        {"apiVersion": "v1", "kind": "ResourceQuota",
         "metadata": {"name": "jobs", "namespace": namespace},
         "spec": {"hard": {"count/jobs.batch": str(jobs)}}},
    )  # fmt: skip


def test_a_submit_refused_midway_says_what_it_wrote_and_resubmitting_converges(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    _quota(cp, namespace, jobs=3)
    spec = write_spec(tmp_path / "job.yaml", "many", namespace, hooks=pod_hooks(run_for="1h"),
                      workers=6, layout="per-worker", trainer={"globalBatchSize": 252})  # fmt: skip

    first = cp.tflaunch("submit", str(spec))

    assert first.code != 0, first
    assert first.err.count("\n") == 1, first
    stored = sorted(j["metadata"]["name"] for j in cp.get("jobs", "-n", namespace)["items"])
    assert len(stored) == 3, first
    assert "half-submitted" in first.err and "exceeded quota" in first.err, first
    for name in stored:
        assert f"Job {name}" in first.err, first
    assert "not yet: 3" in first.err and "submit` again" in first.err, first

    _quota(cp, namespace, jobs=10)
    again = cp.tflaunch("submit", str(spec))
    assert again.code == 0, again
    jobs = cp.get("jobs", "-n", namespace)["items"]
    assert sorted(j["metadata"]["name"] for j in jobs) == [f"many-worker-{i}" for i in range(6)]
