"""`tflaunch logs`: every worker's lines, prefixed by its index; following restarts too."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import pytest

from launcher.cluster import logs
from tests.cluster.conftest import Result
from tests.cluster.fakeapi import Failure, FakeKubernetes, status
from tests.cluster.objects import pod_for, with_condition

Tflaunch = Callable[..., Result]


def test_logs_of_all_workers_are_interleaved_by_time_with_a_prefix_each(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(pod_for(job, 0))
    fake.put(pod_for(job, 1))
    fake.log("mnist-worker-0-a0", "chief: epoch 1", at="2024-05-01T10:00:01.000000000Z")
    fake.log("mnist-worker-1-a0", "worker: epoch 1", at="2024-05-01T10:00:02.000000000Z")
    fake.log("mnist-worker-0-a0", "chief: epoch 2", at="2024-05-01T10:00:03.000000000Z")

    result = tflaunch("logs", "mnist")

    assert result.code == 0
    assert result.out.splitlines() == [
        "[worker 0] chief: epoch 1",
        "[worker 1] worker: epoch 1",
        "[worker 0] chief: epoch 2",
    ]


def test_a_keras_progress_bar_is_shown_as_its_last_frame_after_its_workers_prefix(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    """Keras draws an epoch's bar on one line, each frame after `\\b...\\r` (in pods too:
    tf-keras takes any POSIX stdout for a terminal); printed raw, the `\\r` would put the
    bar over the `[worker N]` prefix, and a saved log would hold every frame."""
    fake.put(pod_for(job, 0))
    frames = "\r1/8 [==>....] - ETA: 5s\b\b\b\b\r8/8 [========] - 1s 20ms/step - loss: 2.7"
    fake.log("mnist-worker-0-a0", frames, at="2024-05-01T10:00:01.000000000Z")

    result = tflaunch("logs", "mnist")

    assert result.code == 0
    assert result.out == "[worker 0] 8/8 [========] - 1s 20ms/step - loss: 2.7\n"


def test_one_workers_logs_with_since(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(pod_for(job, 0))
    fake.put(pod_for(job, 1))
    fake.log("mnist-worker-0-a0", "zero")
    fake.log("mnist-worker-1-a0", "one")

    result = tflaunch("logs", "mnist", "--worker", "1", "--since", "5m")

    assert result.out.splitlines() == ["[worker 1] one"]
    (request,) = [r for r in fake.requests if r.path.endswith("/log")]
    assert request.query["sinceSeconds"] == "300"
    assert request.query["container"] == "trainer"


def test_a_pod_that_has_not_started_has_no_log_yet(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(pod_for(job, 0, phase="Pending", unschedulable="0/1 nodes are available"))

    result = tflaunch("logs", "mnist")

    assert (result.code, result.out) == (0, "")


def test_following_streams_new_lines_and_the_new_pod_after_a_restart(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(pod_for(job, 0))
    fake.log("mnist-worker-0-a0", "first attempt")
    steps = threading.Event()

    def cluster_side() -> None:
        steps.wait(5)
        fake.log("mnist-worker-0-a0", "peer died")
        fake.put(pod_for(job, 0, phase="Failed", exit_code=1))
        fake.end_log("mnist-worker-0-a0")
        fake.put(pod_for(job, 0, attempt=1, age=1))
        fake.log("mnist-worker-0-a1", "second attempt", "done")
        fake.end_log("mnist-worker-0-a1")
        fake.put(with_condition(job, "Complete"))

    thread = threading.Thread(target=cluster_side)
    thread.start()
    threading.Timer(0.3, steps.set).start()

    result = tflaunch("logs", "mnist", "-f")
    thread.join()

    assert result.code == 0
    lines = result.out.splitlines()
    # Each pod's lines keep their order; two pods' streams interleave by arrival.
    assert sorted(lines) == sorted(
        ["[worker 0] first attempt", "[worker 0] peer died",
         "[worker 0] second attempt", "[worker 0] done"]
    )  # fmt: skip
    assert lines.index("[worker 0] first attempt") < lines.index("[worker 0] peer died")
    assert lines.index("[worker 0] second attempt") < lines.index("[worker 0] done")
    assert "[worker 0] --- restart 1: following pod mnist-worker-0-a1 ---" in result.err


def test_following_a_finished_job_prints_its_logs_and_ends(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(with_condition(job, "Complete"))
    for i in range(2):
        fake.put(pod_for(job, i, phase="Succeeded", exit_code=0))
        fake.log(f"mnist-worker-{i}-a0", f"worker {i} finished")
        fake.end_log(f"mnist-worker-{i}-a0")

    result = tflaunch("logs", "mnist", "--follow")

    assert sorted(result.out.splitlines()) == [
        "[worker 0] worker 0 finished",
        "[worker 1] worker 1 finished",
    ]


def test_logs_of_a_missing_job_are_not_found(tflaunch: Tflaunch) -> None:
    result = tflaunch("logs", "ghost")

    assert result.code == 1
    assert "job ghost not found in namespace default" in result.err


def _pod_gone_before_its_log_is_read(fake: FakeKubernetes, pod: str) -> None:
    """Listing saw the pod; by the time its log is read the server answers 404."""
    message = f'pods "{pod}" not found'
    fake.failures.append(
        Failure("GET", re.compile(f"/pods/{pod}/log$"), 404, status(404, "NotFound", message))
    )


def test_a_pod_deleted_between_listing_and_reading_is_skipped_with_a_note(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(pod_for(job, 0))
    fake.put(pod_for(job, 1))
    fake.log("mnist-worker-1-a0", "still here")
    _pod_gone_before_its_log_is_read(fake, "mnist-worker-0-a0")

    result = tflaunch("logs", "mnist")

    assert result.code == 0, result.err
    assert result.out.splitlines() == ["[worker 1] still here"]
    assert result.err.splitlines() == [
        "[worker 0] --- pod mnist-worker-0-a0 was deleted before its log was read; skipped ---"
    ]


def test_following_skips_a_pod_deleted_before_its_stream_opens(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(pod_for(job, 0))
    fake.put(pod_for(job, 1, phase="Succeeded", exit_code=0))
    fake.log("mnist-worker-1-a0", "finished")
    fake.end_log("mnist-worker-1-a0")
    _pod_gone_before_its_log_is_read(fake, "mnist-worker-0-a0")
    threading.Timer(1.0, lambda: fake.put(with_condition(job, "Complete"))).start()

    result = tflaunch("logs", "mnist", "-f")

    assert result.code == 0, result.err
    assert result.out.splitlines() == ["[worker 1] finished"]
    assert "pod mnist-worker-0-a0 was deleted before its log was read; skipped" in result.err


@pytest.mark.timeout(30)
def test_a_followed_stream_that_goes_silent_is_read_anew_without_repeating_lines(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "FOLLOW_IDLE_TIMEOUT", 1.0)
    fake.put(pod_for(job, 0))
    fake.log("mnist-worker-0-a0", "before", "also before")
    fake.stall_log("mnist-worker-0-a0")

    def finish() -> None:
        fake.log("mnist-worker-0-a0", "after")
        fake.end_log("mnist-worker-0-a0")
        fake.put(pod_for(job, 0, phase="Succeeded", exit_code=0))
        fake.put(with_condition(job, "Complete"))

    threading.Timer(0.5, finish).start()

    result = tflaunch("logs", "mnist", "-f", "--worker", "0")

    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        "[worker 0] before",
        "[worker 0] also before",
        "[worker 0] after",
    ]
    reads = [r for r in fake.requests if r.path.endswith("/mnist-worker-0-a0/log")]
    assert len(reads) >= 2
