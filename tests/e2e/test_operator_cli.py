"""The CLI and the operator on the same job, on the real control plane (issue 10 item 4):
`tflaunch operator` runs as a process with its ServiceAccount's token, and the CLI under test
runs as the user. A job the operator runs is followed, shown and deleted through its
MultiWorkerJob; `submit` never applies over it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ControlPlane, eventually, pod_hooks, write_spec
from tests.e2e.test_operator import Operator
from tests.e2e.test_operator import operator as operator  # the module-scoped fixture, one here

pytestmark = pytest.mark.e2e


def test_submit_operator_wait_follows_the_multiworkerjob_through_a_group_restart(
    control_plane: ControlPlane, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    hooks = pod_hooks(run_for="2s", worker_exit={1: 1}, fail_once=True)
    spec = write_spec(tmp_path / "job.yaml", "again", namespace, hooks=hooks, backoffLimit=2)

    run = cp.tflaunch("submit", str(spec), "--operator", "--wait", "--timeout", "150", timeout=200)

    assert run.code == 0, f"{run}\n--- operator\n{operator.log()}"
    assert "multiworkerjob.tflaunch.dev/again created" in run.out, run
    assert "restart 1" in run.err, run  # the child's failure was a restart, not exit 3
    status = cp.get("mwj", "again", "-n", namespace)["status"]
    assert (status["phase"], status["restarts"]) == ("Succeeded", 1), status
    # the restarted group writes (and so resumes) the checkpoints of the same run: the uid's
    uid = cp.get("mwj", "again", "-n", namespace)["metadata"]["uid"]
    (job,) = cp.get("jobs", "-n", namespace)["items"]
    assert job["metadata"]["annotations"]["tflaunch.dev/group-restarts"] == "1"
    assert checkpoint_dir(job) == f"/checkpoints/again/{uid}/backup"


def checkpoint_dir(job: dict[str, Any]) -> str:
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    return str(args[args.index("--checkpoint-dir") + 1])


def test_a_job_the_operator_runs_is_refused_by_submit_shown_from_its_status_and_deleted(
    control_plane: ControlPlane, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "mine", namespace, hooks=pod_hooks(run_for="forever"))
    assert cp.tflaunch("submit", str(spec), "--operator").code == 0
    eventually(
        lambda: (cp.get("mwj", "mine", "-n", namespace).get("status") or {}).get("phase")
        == "Running",
        what="the MultiWorkerJob Running", timeout=90,
    )  # fmt: skip
    before = cp.get("job", "mine-worker", "-n", namespace)

    refused = cp.tflaunch("submit", str(spec))
    assert refused.code == 2, refused
    assert "MultiWorkerJob mine" in refused.err and "nothing was applied" in refused.err, refused
    after = cp.get("job", "mine-worker", "-n", namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"]["backoffLimit"] == 0 and "ttlSecondsAfterFinished" not in after["spec"]

    again = cp.tflaunch("submit", str(spec), "--operator")
    assert again.code == 0 and "mine unchanged" in again.out, again
    shown = cp.tflaunch("status", "mine", "-n", namespace)
    assert shown.code == 0 and "run by the operator" in shown.out, shown
    assert "Running" in shown.out and "restarts 0 of" in shown.out, shown
    listed = cp.tflaunch("list", "-n", namespace)
    assert "Running (operator)" in listed.out, listed

    deleted = cp.tflaunch("delete", "mine", "-n", namespace, timeout=150)
    assert deleted.code == 0, deleted
    assert "multiworkerjob.tflaunch.dev/mine deleted" in deleted.out, deleted
    assert not cp.get("mwj,jobs,pods", "-n", namespace)["items"]
    # the operator saw its resource terminate: it recreated nothing
    operator.process.poll()
    assert operator.process.returncode is None
    assert not cp.get("jobs", "-n", namespace)["items"]


def test_submit_operator_refuses_a_job_submitted_without_it(
    control_plane: ControlPlane, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "plain", namespace, hooks=pod_hooks(run_for="forever"))
    assert cp.tflaunch("submit", str(spec)).code == 0

    refused = cp.tflaunch("submit", str(spec), "--operator")

    assert refused.code == 2, refused
    assert "submitted without the operator (Job plain-worker)" in refused.err, refused
    assert not cp.get("mwj", "-n", namespace)["items"]
