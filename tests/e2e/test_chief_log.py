"""What tflaunch reads from the chief's log, read through the real API server from kwok's
kubelet server (`ControlPlane.serve_logs`; kwok runs no containers, so the test writes the
lines a trainer would print):

- the operator's own refresh copies the chief's latest `TFLAUNCH_PROGRESS` line into
  status.progress, and on success its `TFLAUNCH_RESULT` line into status.result;
- `tflaunch status` and `wait` of a job submitted by the CLI show where training stands
  from the chief's log tail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.core import contract
from tests.e2e.conftest import ControlPlane, cri_log_line, eventually, pod_hooks
from tests.e2e.test_operator import Operator, _mwj, _phase_is, _status, operator  # noqa: F401
from tests.e2e.test_progress import LINE, assert_status_and_wait_show_line

pytestmark = pytest.mark.e2e

PROGRESS = LINE
RESULT = {"test_accuracy": 0.9871, "test_loss": 0.0412, "epochs": 5}


def test_the_operator_copies_progress_and_result_from_the_chiefs_log(
    control_plane: ControlPlane,
    operator: Operator,  # noqa: F811 (the module-scoped fixture imported above)
    namespace: str,
    tmp_path: Path,
) -> None:
    cp = control_plane
    log_file = tmp_path / "trainer.log"
    log_file.write_text(cri_log_line("preflight ok") + cri_log_line(PROGRESS))
    cp.serve_logs(namespace, log_file)
    cp.apply(_mwj("train", namespace, pod_hooks(run_for="40s")))

    written = eventually(
        lambda: _status(cp, "train", namespace).get("progress"),
        timeout=120,
        what="status.progress written by the operator",
    )
    assert (written["epoch"], written["epochs"], written["step"], written["steps"]) == (
        2, 5, 120, 469,
    ), written  # fmt: skip
    table = cp.kubectl("get", "mwj", "train", "-n", namespace).out.splitlines()
    assert table[1].split()[4:6] == ["2/5", "1m20s"], table

    with log_file.open("a") as log:
        log.write(cri_log_line(contract.RESULT_LINE_PREFIX + json.dumps(RESULT)))
    done = eventually(
        _phase_is(cp, "train", namespace, "Succeeded"), timeout=150, what="phase Succeeded"
    )
    assert done["result"]["test_accuracy"] == pytest.approx(0.9871), done
    shown = cp.tflaunch("status", "train", "-n", namespace)
    assert shown.code == 0, shown
    assert "0.9871" in shown.out, shown


def test_status_and_wait_of_a_cli_job_show_progress_from_the_chiefs_log(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    log_file = tmp_path / "trainer.log"
    log_file.write_text(cri_log_line("preflight ok") + cri_log_line(PROGRESS))
    cp.serve_logs(namespace, log_file)
    run = cp.submit(tmp_path / "job.yaml", "cli", namespace, hooks=pod_hooks(run_for="forever"))
    assert run.code == 0, run
    cp.wait_active(namespace, "cli-worker")

    assert_status_and_wait_show_line(cp, "cli", namespace, "(the chief's log)")
