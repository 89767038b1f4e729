"""Checkpoints keyed by run on the real control plane (issue 10 item 11): `tflaunch submit`
picks a run at the first submit and keeps it across unchanged resubmits; a new submission
(--replace) is a new run, so it never resumes the earlier run's backup on the shared claim;
continuing an earlier run is asked for by name (spec.checkpoint.run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ControlPlane, write_spec
from tests.e2e.test_operator_cli import checkpoint_dir

pytestmark = pytest.mark.e2e

RUN = "tflaunch.dev/checkpoint-run"


def _job(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    job: dict[str, Any] = cp.get("job", "ckpt-worker", "-n", namespace)
    return job


def test_a_run_is_kept_by_an_unchanged_resubmit_and_a_new_submission_is_a_new_run(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "ckpt", namespace, checkpoint={"claimName": "shared"})

    first = cp.tflaunch("submit", str(spec))
    assert first.code == 0, first
    job = _job(cp, namespace)
    run = job["metadata"]["annotations"][RUN]
    assert checkpoint_dir(job) == f"/checkpoints/ckpt/{run}/backup"
    assert f"--set spec.checkpoint.run={run}" in first.err, first

    again = cp.tflaunch("submit", str(spec))
    assert again.code == 0 and "job.batch/ckpt-worker unchanged" in again.out, again
    assert _job(cp, namespace)["metadata"]["annotations"][RUN] == run

    replaced = cp.tflaunch("submit", str(spec), "--replace", timeout=200)
    assert replaced.code == 0, replaced
    new_run = _job(cp, namespace)["metadata"]["annotations"][RUN]
    assert new_run != run
    assert checkpoint_dir(_job(cp, namespace)) == f"/checkpoints/ckpt/{new_run}/backup"

    resumed = cp.tflaunch(
        "submit", str(spec), "--replace", "--set", f"spec.checkpoint.run={run}", timeout=200
    )
    assert resumed.code == 0, resumed
    assert checkpoint_dir(_job(cp, namespace)) == f"/checkpoints/ckpt/{run}/backup"


def test_a_run_id_that_is_not_a_path_segment_is_refused_before_anything_is_applied(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "ckpt", namespace)

    refused = cp.tflaunch("submit", str(spec), "--set", "spec.checkpoint.run=../other")

    assert refused.code == 2, refused
    assert "spec.checkpoint.run" in refused.err
    assert not cp.get("jobs", "-n", namespace)["items"]
