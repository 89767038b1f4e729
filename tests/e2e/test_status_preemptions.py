"""What `status` and `wait` show beyond the newest pods, on the real control plane:

- the preemptions of a job `tflaunch submit` applied (its pods that exited 79, replaced by the
  Job without counting a failure), with the step the termination message names;
- the MultiWorkerJob's status (phase, restarts, preemptions) of a job the operator runs, in
  `status -o json` (status.operator) and as lines of `status -w`.

kwok runs no containers: exit 79 and the termination message come from the pod-hook
annotations kwok.tflaunch.dev/exit-code-1 and kwok.tflaunch.dev/message-1 (hack/kwok/stages.yaml),
on every pod of worker 1, so worker 1 is preempted again after each replacement.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.e2e.conftest import ControlPlane, eventually, pod_hooks, stop_process, write_spec
from tests.e2e.test_operator import Operator
from tests.e2e.test_operator import operator as operator  # the module-scoped fixture, one here

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).parents[2]
SCHEMA = json.loads((ROOT / "docs" / "output-schema.json").read_text())
SAVED = "preempted: every worker saved at step 40 (epoch 1, step 40 of 100); exiting 79"


def preempted_hooks(run_for: str = "2s") -> dict[str, str]:
    return {**pod_hooks(run_for=run_for, worker_exit={1: 79}), "kwok.tflaunch.dev/message-1": SAVED}


def status_document(cp: ControlPlane, name: str, namespace: str) -> dict[str, Any]:
    run = cp.tflaunch("status", name, "-n", namespace, "-o", "json")
    assert run.code == 0, run
    document: dict[str, Any] = json.loads(run.out)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    return document


def preempted_pods(cp: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    return [
        p
        for p in cp.get("pods", "-n", namespace)["items"]
        for c in p.get("status", {}).get("containerStatuses") or ()
        if ((c.get("state") or {}).get("terminated") or {}).get("exitCode") == 79
    ]


def test_status_and_wait_show_the_preemptions_of_a_submitted_job(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    run = cp.submit(
        tmp_path / "job.yaml", "pre", namespace,
        backoffLimit=0, terminationGracePeriodSeconds=1, hooks=preempted_hooks(),
    )  # fmt: skip
    assert run.code == 0, run
    # Each of worker 1's pods exits 79 at least 2 s after the one before (run-for), beyond the
    # 1 s grace period: each exit is a preemption of its own, all at the saved step 40.
    document = eventually(
        lambda: (d := status_document(cp, "pre", namespace))["status"]["preemptions"] >= 2 and d,
        what="two preemptions in status -o json",
        timeout=120,
    )
    body = document["status"]
    assert body["resumedAtStep"] == 40, body
    assert body["lastPreemptionTime"] and body["operator"] is None, body
    # events, not pods: here one pod per preemption (only worker 1 is told to stop)
    assert body["preemptions"] <= len(preempted_pods(cp, namespace))
    job = cp.get("job", "pre-worker", "-n", namespace)
    assert job["status"].get("failed", 0) == 0, job["status"]  # never a failure

    shown = cp.tflaunch("status", "pre", "-n", namespace)
    assert shown.code == 0, shown
    line = re.search(r"^preempted (\d+)x, resumed at step 40 \(not a failure: no retry used\)$",
                     shown.out, re.MULTILINE)  # fmt: skip
    assert line and int(line.group(1)) >= 2, shown
    wide = cp.tflaunch("status", "pre", "-n", namespace, "-o", "wide")
    assert "resumed at step 40 (not a failure: no retry used)" in wide.out, wide

    watched = cp.tflaunch("status", "pre", "-n", namespace, "-w", "--timeout", "3s")
    assert watched.code == 0, watched
    assert re.search(r"^job pre: preempted \d+x, resumed at step 40 \(not a failure",
                     watched.out, re.MULTILINE), watched  # fmt: skip

    # The job never ends (worker 1 keeps being preempted): wait times out (exit 4) and prints
    # its final status; the preemptions are said, and none of them as a worker's restart.
    waited = cp.tflaunch("wait", "pre", "-n", namespace, "--timeout", "5", "-o", "json")
    assert waited.code == 4, waited
    assert json.loads(waited.out)["status"]["preemptions"] >= 2, waited
    assert "resumed at step 40 (not a failure: no retry used); the Job replaces" in waited.err
    assert "restarted" not in waited.err, waited


class LineReader:
    """The lines a running process prints on stdout, collected by a thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def having(self, text: str) -> list[str]:
        return [line for line in list(self.lines) if text in line]


def test_status_shows_the_multiworkerjobs_status_in_json_and_in_the_watch(
    control_plane: ControlPlane, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(
        tmp_path / "job.yaml", "opre", namespace,
        hooks=preempted_hooks(run_for="3s"), backoffLimit=2, terminationGracePeriodSeconds=1,
    )  # fmt: skip
    assert cp.tflaunch("submit", str(spec), "--operator").code == 0
    document = eventually(
        lambda: (
            (d := status_document(cp, "opre", namespace))["status"]["operator"]
            and d["status"]["operator"]["preemptions"] >= 1
            and d
        ),
        what="the operator's preemption in status -o json",
        timeout=120,
    )
    shown = document["status"]["operator"]
    mwj = cp.get("mwj", "opre", "-n", namespace)
    assert shown["multiWorkerJob"] == "opre" and shown["backoffLimit"] == 2, shown
    assert shown["phase"] in ("Created", "Running"), shown
    assert shown["restarts"] == mwj["status"].get("restarts", 0) == 0, (shown, mwj["status"])
    assert shown["resumedAtStep"] == 40, shown  # the operator read kwok's termination message
    yaml_run = cp.tflaunch("status", "opre", "-n", namespace, "-o", "yaml")
    assert yaml_run.code == 0 and "multiWorkerJob: opre" in yaml_run.out, yaml_run

    watched = cp.tflaunch("status", "opre", "-n", namespace, "-w", "--timeout", "3s", "-o", "json")
    assert watched.code == 0, watched
    first, _ = json.JSONDecoder().raw_decode(watched.out)  # a document per change
    assert first["status"]["operator"]["multiWorkerJob"] == "opre", first

    waited = cp.tflaunch("wait", "opre", "-n", namespace, "--timeout", "5", "-o", "json")
    assert waited.code == 4, waited  # worker 1 keeps being preempted: it never ends
    assert json.loads(waited.out)["status"]["operator"]["preemptions"] >= 1, waited
    assert re.search(r"opre: \w+, \S+ workers ready, restarts 0, preempted \d+x", waited.err)

    # The watch prints the MultiWorkerJob's line, and a new one when its phase changes.
    watching = cp.popen_tflaunch("status", "opre", "-n", namespace, "-w")
    reader = LineReader(watching)
    try:
        eventually(
            lambda: (
                reader.having("multiworkerjob opre: Running")
                or reader.having("multiworkerjob opre: Created")
            ),
            what="the MultiWorkerJob's line in status -w",
            timeout=60,
        )
        assert any("preempted" in line for line in reader.having("multiworkerjob opre:"))
        cp.kubectl("patch", "mwj", "opre", "-n", namespace, "--type=merge",
                   "-p", '{"spec": {"suspend": true}}')  # fmt: skip
        suspended = eventually(
            lambda: reader.having("multiworkerjob opre: Suspended"),
            what="a new line for the phase Suspended",
            timeout=90,
        )
        assert "restarts 0 of 2" in suspended[0], reader.lines
    finally:
        if watching.poll() is None:
            watching.send_signal(signal.SIGINT)  # Ctrl-C: how a watch ends (exit 0)
        try:
            watching.wait(timeout=30)
        except subprocess.TimeoutExpired:
            stop_process(watching)
    assert watching.returncode == 0, (watching.returncode, reader.lines)
