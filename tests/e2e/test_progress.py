"""Where training stands, on the real control plane (issue 13 items 3-4): the MultiWorkerJob's
status.progress shows in `kubectl get mwj` (the CRD's Epoch and ETA printer columns, printed
by the real API server), in `tflaunch status` and in `tflaunch wait`.

This test writes status.progress exactly as the operator would (the operator's own
`from_log` on a real progress line, merged into the status subresource) while the real
operator process runs the job, so the columns and the CLI are checked on a known value. The
operator's own refresh, reading the chief's log through the API server, is
tests/e2e/test_chief_log.py; the refresh decision is a pure unit
(tests/operator/test_progress_status.py); the lines themselves come from real TensorFlow
workers in tests/local."""

from __future__ import annotations

import datetime
import json

import pytest

from launcher.core import progress
from launcher.core.progress import Progress
from launcher.operator import crd
from launcher.operator import progress as operator_progress
from tests.e2e.conftest import ControlPlane, eventually, pod_hooks, write_spec
from tests.e2e.test_operator import Operator, _mwj, _phase_is, operator  # noqa: F401

pytestmark = pytest.mark.e2e

LINE = progress.format_line(Progress(2, 5, 120, 469, 0.1234, 3456.7, 80.0))


def test_the_operators_progress_shows_in_kubectl_status_and_wait(
    control_plane: ControlPlane,
    operator: Operator,  # noqa: F811 (the module-scoped fixture imported above)
    namespace: str,
) -> None:
    cp = control_plane
    cp.apply(_mwj("train", namespace, pod_hooks(run_for="forever")))
    eventually(_phase_is(cp, "train", namespace, "Running"), what="phase Running", timeout=90)
    now = datetime.datetime.now(datetime.timezone.utc)
    written = operator_progress.from_log(f"12:00:00 [worker 0/2] INFO x\n{LINE}\n", now)
    patch = {"status": {"progress": crd.document_of(written)}}
    cp.kubectl("patch", "mwj", "train", "-n", namespace, "--subresource=status",
               "--type=merge", "-p", json.dumps(patch))  # fmt: skip

    table = cp.kubectl("get", "mwj", "train", "-n", namespace).out.splitlines()
    header, row = table[0].split(), table[1].split()
    assert header[:6] == ["NAME", "PHASE", "WORKERS", "RESTARTS", "EPOCH", "ETA"], table
    assert row[:6] == ["train", "Running", "2/2", "0", "2/5", "1m20s"], table

    assert_status_and_wait_show_line(cp, "train", namespace, "(status.progress, ")
    # The operator, reconciling meanwhile, keeps what it did not read anew.
    kept = cp.get("mwj", "train", "-n", namespace)["status"]["progress"]
    assert (kept["epochText"], kept["eta"], kept["etaSeconds"]) == ("2/5", "1m20s", 80.0)


def test_a_cli_job_whose_chief_has_no_log_shows_no_progress_and_no_error(
    control_plane: ControlPlane, namespace: str, tmp_path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "nolog", namespace, hooks=pod_hooks(run_for="forever"))
    assert cp.tflaunch("submit", str(spec)).code == 0
    cp.wait_active(namespace, "nolog-worker")
    eventually(
        lambda: all(p["status"].get("phase") == "Running"
                    for p in cp.get("pods", "-n", namespace)["items"]),
        what="running pods",
    )  # fmt: skip
    status = cp.tflaunch("status", "nolog", "-n", namespace)
    assert status.code == 0, status
    assert "training:" not in status.out and "Running" in status.out, status
    wait = cp.tflaunch("wait", "nolog", "-n", namespace, "--timeout", "2")
    assert wait.code == 4 and "epoch" not in wait.err, wait


def assert_status_and_wait_show_line(
    cp: ControlPlane, name: str, namespace: str, source: str
) -> None:
    """`status` and `wait` of a job whose progress is LINE's, read from `source`."""
    status = cp.tflaunch("status", name, "-n", namespace)
    assert status.code == 0, status
    assert (
        f"training: epoch 2/5, step 120/469, loss 0.1234, 3457 images/s, ETA 1m20s {source}"
        in status.out
    ), status
    wait = cp.tflaunch("wait", name, "-n", namespace, "--timeout", "3")
    assert wait.code == 4, wait  # runs forever: timed out
    assert "epoch 2/5 step 120/469 ETA 1m20s" in wait.err, wait
