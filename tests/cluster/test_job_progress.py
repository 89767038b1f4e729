"""`tflaunch status` and `wait` show where training stands: the chief's latest progress from
its log tail (here) or from the MultiWorkerJob's status.progress (tests/e2e/test_progress.py,
on the real API server); and `wait`'s line stays short for any number of workers and, on
a terminal (a pty), is cut to its width."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher.cli import job_progress
from launcher.cluster import status
from launcher.core import contract, progress
from launcher.core.progress import Progress
from tests.cluster.conftest import Result, job_objects
from tests.cluster.fakeapi import FakeKubernetes
from tests.cluster.objects import pod_for

Tflaunch = Callable[..., Result]
LINE = progress.format_line(Progress(2, 5, 120, 469, 0.1234, 3456.7, 80.0))


def test_status_shows_the_chiefs_latest_progress_from_its_log(
    tflaunch: Tflaunch, fake: FakeKubernetes, running_job: dict[str, Any]
) -> None:
    fake.log("mnist-worker-0-a0", progress.format_line(Progress(1, 5, 469, 469, 0.5)), LINE,
             "12:00:01 [worker 0/2] INFO something else")  # fmt: skip
    fake.log("mnist-worker-1-a0", progress.format_line(Progress(5, 5, 1, 469)))  # not the chief

    result = tflaunch("status", "mnist")

    assert result.code == 0
    assert result.out.splitlines()[1] == (
        "training: epoch 2/5, step 120/469, loss 0.1234, 3457 images/s, ETA 1m20s (the chief's log)"
    )


def test_status_without_a_progress_line_shows_none(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(pod_for(job, 0))
    fake.put(pod_for(job, 1, phase="Pending", node=None))

    result = tflaunch("status", "mnist")

    assert result.code == 0 and "training:" not in result.out
    assert result.out.splitlines()[1].split()[0] == "WORKER"


def test_the_operators_copy_is_read_from_the_multiworkerjobs_status() -> None:
    now = datetime.datetime(2030, 1, 1, 0, 1, tzinfo=datetime.timezone.utc)
    resource = {"status": {"progress": {
        "epoch": 2, "epochs": 5, "step": 120, "steps": 469, "etaSeconds": 80.0,
        "updated": "2030-01-01T00:00:30Z", "epochText": "2/5", "eta": "1m20s",
    }}}  # fmt: skip
    seen = job_progress.from_resource(resource)
    assert seen is not None
    assert seen.words(now) == "epoch 2/5, step 120/469, ETA 1m20s (status.progress, 30s ago)"
    assert seen.short() == "epoch 2/5 step 120/469 ETA 1m20s"
    assert job_progress.from_resource({"status": {"phase": "Running"}}) is None


def test_waits_line_names_the_training_and_stays_short_for_64_restarted_workers() -> None:
    job = job_objects()[-1]
    job["spec"]["completions"] = job["spec"]["parallelism"] = 64
    pods = [pod_for(job, i, attempt=a) for i in range(64) for a in range(2)]
    summary = status.summarize("mnist", "default", [job], pods)
    assert summary.restarts == 64
    line = status.progress_line(summary, 125, "epoch 2/5 step 120/469 ETA 1m20s")
    assert line == (
        "mnist: running, 64/64 workers running, epoch 2/5 step 120/469 ETA 1m20s, "
        "restarts: 64 workers, 64 in all, 2m5s"
    )
    few = status.summarize(
        "mnist", "default", [job], pods[:4] + [pod_for(job, i) for i in range(2, 64)]
    )
    assert "restarts: worker 0 x1, worker 1 x1, " in status.progress_line(few, 1)


def test_waits_line_counts_the_restarts_in_place_the_chiefs_program_reports() -> None:
    """In place, no pod is replaced: only the program knows its generation ($TFLAUNCH_RESTARTS),
    which the chief's progress line carries."""
    line = progress.format_line(progress.Progress(2, 5, 120, 469, generation=2))
    seen = progress.parse_line(line)
    assert seen is not None and seen.generation == 2
    summary = status.summarize("mnist", "default", [job_objects()[-1]], [])
    assert "restarts in place: 2, " in status.progress_line(summary, 5, "epoch 2/5", 2)
    assert "no restarts" in status.progress_line(summary, 5, "epoch 2/5", 0)
    assert "generation" not in progress.format_line(progress.Progress(1, 5, 1, 469))


def test_wait_shows_the_chiefs_progress_from_its_log(
    tflaunch: Tflaunch, fake: FakeKubernetes, running_job: dict[str, Any]
) -> None:
    fake.log("mnist-worker-0-a0", LINE)

    result = tflaunch("wait", "mnist", "--timeout", "1")

    assert result.code == 4, result  # still running
    assert "mnist: running, 2/2 workers running, epoch 2/5 step 120/469 ETA 1m20s, " in result.err


RESTART = contract.restart_line(
    1, [(0, "UnavailableError: Collective ops is aborted by: peer 1 (the program exited 1)"),
        (1, "Epoch 1/5 (the program was killed by SIGKILL)")],
)  # fmt: skip
"""The wrappers' line for a group restarted in place after worker 1's program was killed."""


def test_status_counts_and_names_the_restarts_in_place_from_the_chiefs_log(
    tflaunch: Tflaunch, fake: FakeKubernetes, running_job: dict[str, Any]
) -> None:
    fake.log(
        "mnist-worker-0-a0", RESTART, progress.format_line(Progress(1, 5, 9, 469, generation=1))
    )

    result = tflaunch("status", "mnist")

    assert result.code == 0
    assert result.out.splitlines()[2] == (
        "restarts in place: 1; the last: worker 1 was killed by SIGKILL: Epoch 1/5 "
        "(worker 0 exited 1 too)"
    )


def test_status_reads_the_restarts_in_place_from_a_peer_once_the_chiefs_pod_is_gone(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(pod_for(job, 1))  # a failed Job deleted worker 0's pod, still running then
    fake.log("mnist-worker-1-a0", RESTART, "Traceback ...")

    result = tflaunch("status", "mnist")

    assert result.code == 0
    assert result.out.splitlines()[1] == (
        "restarts in place: 1; the last: worker 1 was killed by SIGKILL: Epoch 1/5 "
        "(worker 0 exited 1 too)"
    )


def test_wait_says_each_restart_in_place_once_with_the_worker_and_its_cause(
    tflaunch: Tflaunch, fake: FakeKubernetes, running_job: dict[str, Any]
) -> None:
    again = contract.restart_line(2, [(1, "Epoch 2/5 (the program was killed by SIGKILL)")])
    fake.log("mnist-worker-0-a0", RESTART, LINE, again, RESTART)

    result = tflaunch("wait", "mnist", "--timeout", "1")

    assert result.code == 4, result  # still running
    said = [line for line in result.err.splitlines() if ": restart in place " in line]
    assert said == [
        "mnist: restart in place 1: worker 1 was killed by SIGKILL: Epoch 1/5 (worker 0 exited "
        "1 too); every worker restarts its program in its pod, resuming from the last checkpoint",
        "mnist: restart in place 2: worker 1 was killed by SIGKILL: Epoch 2/5; every worker "
        "restarts its program in its pod, resuming from the last checkpoint",
    ]
    assert "restarts in place: 2, " in result.err


def test_on_a_terminal_waits_line_is_redrawn_in_place_and_cut_to_its_width(
    fake: FakeKubernetes, kubeconfig: Path, running_job: dict[str, Any]
) -> None:
    import os
    import re
    import sys

    import pexpect

    fake.log("mnist-worker-0-a0", LINE)
    columns = 50
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "launcher", "wait", "mnist", "--timeout", "2", "--kubeconfig", str(kubeconfig)],
        env=env, encoding="utf-8", dimensions=(24, columns), timeout=120,
    )  # fmt: skip
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 4, child.before  # still running: timed out
    # Each redraw: clear the line, write it, no newline (the final message has its own line).
    parts = child.before.split("\r\x1b[2K")[1:]
    drawn = [re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", p) for p in parts if p and "\n" not in p]
    assert drawn and all(line.startswith("mnist: running") for line in drawn), parts
    assert all(len(line) < columns for line in drawn), drawn  # never wraps: redrawable
    assert any(line.endswith("…") for line in drawn), drawn  # cut, not just short
