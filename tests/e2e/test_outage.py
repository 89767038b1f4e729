"""`logs -f` and `delete` ride out a restart of the real kube-apiserver, as `wait` does
(tests/e2e/test_wait.py): a control-plane upgrade must not end a command that follows a job.

The logs come from kwok's kubelet server through the API server (`ControlPlane.serve_logs`);
kwok runs no containers, so the test writes the log file itself.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO

import pytest

from tests.e2e.conftest import ControlPlane, cri_log_line, eventually, pod_hooks, stop_process

pytestmark = pytest.mark.e2e


def _lines_of(stream: IO[str]) -> queue.Queue[str]:
    """Every line of `stream`, read by a thread, so a test can look without blocking."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _drain(lines: queue.Queue[str], into: list[str]) -> list[str]:
    while True:
        try:
            into.append(lines.get_nowait())
        except queue.Empty:
            return into


def _needs_owned(cp: ControlPlane) -> None:
    if not cp.owned:
        pytest.skip("restarts the API server: only on a cluster this session started")


def test_logs_follow_rides_out_a_control_plane_restart(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    _needs_owned(cp)
    log_file = tmp_path / "trainer.log"
    log_file.write_text(cri_log_line("epoch 1 begins") + cri_log_line("epoch 1 ends"))
    cp.serve_logs(namespace, log_file)
    run = cp.submit(tmp_path / "job.yaml", "follow", namespace, hooks=pod_hooks(run_for="forever"))
    assert run.code == 0, run
    cp.wait_active(namespace, "follow-worker")
    follower = cp.popen_tflaunch("logs", "follow", "-n", namespace, "-f")
    assert follower.stdout is not None and follower.stderr is not None
    out, err = _lines_of(follower.stdout), _lines_of(follower.stderr)
    seen: list[str] = []
    try:
        eventually(
            lambda: sum("epoch 1 ends" in line for line in _drain(out, seen)) == 2,
            what="both workers' existing lines",
        )
        cp.stop_apiserver()
        try:
            with log_file.open("a") as log:
                log.write(cri_log_line("written while the API server is down"))
            time.sleep(4)
            assert follower.poll() is None, "logs -f must not give up while the API server is down"
        finally:
            cp.start_apiserver()  # also on failure: the next tests share this cluster
        with log_file.open("a") as log:
            log.write(cri_log_line("written after it is back"))
        eventually(
            lambda: sum("after it is back" in line for line in _drain(out, seen)) == 2,
            timeout=120,
            what="both workers' lines written after the restart",
        )
        assert follower.poll() is None
        follower.send_signal(signal.SIGINT)
        follower.wait(timeout=60)
    finally:
        stop_process(follower)
    time.sleep(0.5)  # the reader threads' last lines
    texts = Counter(line.split("] ", 1)[-1] for line in _drain(out, seen))
    # Every line once per worker: nothing lost in the outage, nothing repeated on resuming.
    assert texts == {
        "epoch 1 begins": 2,
        "epoch 1 ends": 2,
        "written while the API server is down": 2,
        "written after it is back": 2,
    }, seen
    notices = "\n".join(_drain(err, []))
    assert "unavailable since" in notices, notices
    assert "error" not in notices, notices


def test_delete_rides_out_a_control_plane_restart(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    _needs_owned(cp)
    run = cp.submit(tmp_path / "job.yaml", "gone", namespace, hooks=pod_hooks(run_for="forever"))
    assert run.code == 0, run
    cp.wait_active(namespace, "gone-worker")
    # A finalizer of our own holds the Job, so the deletion is still under way when the API
    # server goes away. (Holding one of its pods instead left the outcome to the garbage
    # collector's view of the Job's dependents, which sometimes let the Job go at once.)
    hold = "e2e.tflaunch.dev/hold"
    cp.kubectl(
        "patch", "job", "gone-worker", "-n", namespace, "--type", "merge",
        "-p", json.dumps({"metadata": {"finalizers": [hold]}}),
    )  # fmt: skip
    deleter = cp.popen_tflaunch("delete", "gone", "-n", namespace, "--timeout", "240")
    try:
        eventually(
            lambda: cp.get("job", "gone-worker", "-n", namespace)["metadata"].get(
                "deletionTimestamp"
            ),
            what="the Job marked for deletion",
        )
        cp.stop_apiserver()
        try:
            time.sleep(4)
            assert deleter.poll() is None, "delete must not give up while the API server is down"
        finally:
            cp.start_apiserver()
        eventually(lambda: _release(cp, namespace, "gone-worker", hold), what="the hold released")
        out, err = deleter.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        stop_process(deleter)
        raise
    assert deleter.returncode == 0, f"exit {deleter.returncode}\n{out}\n{err}"
    assert "unavailable since" in err, err
    left = cp.kubectl(
        "get", "jobs,pods,services,networkpolicies", "-n", namespace,
        "-l", "tflaunch.dev/job-name=gone", "-o", "name",
    ).out  # fmt: skip
    assert left.strip() == "", left


def _release(cp: ControlPlane, namespace: str, job: str, finalizer: str) -> bool:
    """Remove `finalizer` from the Job and nothing else: a JSON patch that tests the entry it
    removes, so a concurrent change by the garbage collector makes it fail and retry."""
    finalizers = cp.get("job", job, "-n", namespace)["metadata"].get("finalizers") or []
    if finalizer not in finalizers:
        return True
    at = f"/metadata/finalizers/{finalizers.index(finalizer)}"
    patch = [{"op": "test", "path": at, "value": finalizer}, {"op": "remove", "path": at}]
    run = cp.kubectl(
        "patch", "job", job, "-n", namespace, "--type", "json", "-p", json.dumps(patch),
        check=False,
    )  # fmt: skip
    return run.code == 0
