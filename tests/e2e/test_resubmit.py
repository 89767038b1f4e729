"""Submitting a job that already runs, on the real API server: an unchanged spec never flips
`suspend` that someone else (Kueue, a person) changed since, a changed spec.suspend does, and a
changed layout never starts a second worker group beside the first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ControlPlane, eventually, pod_hooks, write_spec

pytestmark = pytest.mark.e2e

SELECTOR = "tflaunch.dev/job-name"


def _job(cp: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    job: dict[str, Any] = cp.get("job", name, "-n", namespace)
    return job


def _pod_uids(cp: ControlPlane, namespace: str, job: str) -> set[str]:
    pods = cp.get("pods", "-n", namespace, "-l", f"{SELECTOR}={job}")["items"]
    return {p["metadata"]["uid"] for p in pods if not p["metadata"].get("deletionTimestamp")}


def _set_suspend(cp: ControlPlane, namespace: str, job: str, value: bool) -> None:
    """What Kueue does when it admits (false) or preempts (true) a Job: an update by another
    field manager."""
    patch = '{"spec":{"suspend":%s}}' % ("true" if value else "false")
    cp.kubectl("patch", "job", job, "-n", namespace, "--type", "merge", "-p", patch)


def test_resubmitting_keeps_a_job_that_kueue_resumed_running(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(
        tmp_path / "job.yaml", "queued", namespace, suspend=True, hooks=pod_hooks(run_for="forever")
    )
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run
    assert _job(cp, namespace, "queued-worker")["spec"]["suspend"] is True
    _set_suspend(cp, namespace, "queued-worker", False)
    pods = eventually(
        lambda: (u := _pod_uids(cp, namespace, "queued")) and len(u) == 2 and u,
        what="both workers created once resumed",
    )

    again = cp.tflaunch("submit", str(spec))
    assert again.code == 0, again
    assert _job(cp, namespace, "queued-worker")["spec"]["suspend"] is False
    assert _pod_uids(cp, namespace, "queued") == pods, "the running workers must not be killed"


def test_resubmitting_keeps_a_suspended_job_in_its_queue(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "held", namespace, hooks=pod_hooks(run_for="forever"))
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run
    _set_suspend(cp, namespace, "held-worker", True)

    again = cp.tflaunch("submit", str(spec))
    assert again.code == 0, again
    assert _job(cp, namespace, "held-worker")["spec"]["suspend"] is True


def test_changing_spec_suspend_on_purpose_suspends_and_resumes(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "pause", namespace, hooks=pod_hooks(run_for="forever"))
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run

    paused = cp.tflaunch("submit", str(spec), "--set", "spec.suspend=true")
    assert paused.code == 0, paused
    assert _job(cp, namespace, "pause-worker")["spec"]["suspend"] is True

    resumed = cp.tflaunch("submit", str(spec))
    assert resumed.code == 0, resumed
    assert _job(cp, namespace, "pause-worker")["spec"]["suspend"] is False


def _job_names(cp: ControlPlane, namespace: str, job: str) -> set[str]:
    jobs = cp.get("jobs", "-n", namespace, "-l", f"{SELECTOR}={job}")["items"]
    return {j["metadata"]["name"] for j in jobs if not j["metadata"].get("deletionTimestamp")}


def test_changing_the_layout_is_refused_and_replace_replaces_the_worker_group(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "lay", namespace, hooks=pod_hooks(run_for="forever"))
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run
    assert _job_names(cp, namespace, "lay") == {"lay-worker"}

    refused = cp.tflaunch("submit", str(spec), "--layout", "per-worker")
    assert refused.code == 2, refused
    assert len(refused.err.strip().splitlines()) == 1, refused
    assert "--replace" in refused.err and "lay-worker" in refused.err
    assert _job_names(cp, namespace, "lay") == {"lay-worker"}, "nothing may be applied"

    replaced = cp.tflaunch("submit", str(spec), "--layout", "per-worker", "--replace", timeout=180)
    assert replaced.code == 0, replaced
    assert _job_names(cp, namespace, "lay") == {"lay-worker-0", "lay-worker-1"}
    eventually(
        lambda: (
            {p["metadata"]["labels"].get("job-name") for p in _pods(cp, namespace, "lay")}
            == {"lay-worker-0", "lay-worker-1"}
        ),
        what="only the new worker group's pods",
    )

    back = cp.tflaunch("submit", str(spec))
    assert back.code == 2, back
    assert "lay-worker-0" in back.err and "--replace" in back.err
    assert _job_names(cp, namespace, "lay") == {"lay-worker-0", "lay-worker-1"}


def _pods(cp: ControlPlane, namespace: str, job: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = cp.get("pods", "-n", namespace, "-l", f"{SELECTOR}={job}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]
