"""status.progress: the chief's latest progress line, read from its log at most every 30 s
while the group runs (issue 13 item 4). Pure decisions, on the simulated cluster of sim.py;
on the real API server, tests/e2e/test_progress.py writes the same status for wait/status."""

from __future__ import annotations

import dataclasses
import datetime

from launcher.core import progress as progress_lib
from launcher.core.progress import Progress
from launcher.core.timestamps import format_time
from launcher.operator import crd
from launcher.operator import progress as progress_status
from tests.operator.sim import T0, Cluster, resource

LOG = "\n".join([
    "12:00:00 [worker 0/2] INFO plan: TrainingPlan(...)",
    progress_lib.format_line(Progress(1, 5, 469, 469, 0.3, 3000.0, 400.0)),
    "12:00:01 [worker 0/2] INFO epoch 1/5: loss=0.3 accuracy=0.9 (100.0s)",
    progress_lib.format_line(Progress(2, 5, 120, 469, 0.1234, 3456.7, 80.0)),
])  # fmt: skip
SECOND = datetime.timedelta(seconds=1)


def running(chief_log: str | None = LOG) -> Cluster:
    cluster = Cluster(resource(), chief_log=chief_log)
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    return cluster


def test_a_running_group_gets_the_chiefs_latest_progress_and_looks_again_in_30s() -> None:
    cluster = running()
    progress = cluster.status.progress
    assert progress == crd.ProgressStatus(
        epoch=2, epochs=5, step=120, steps=469, loss=0.1234, eta_seconds=80.0,
        images_per_sec=3456.7, updated=format_time(T0), epoch_text="2/5", eta="1m20s",
    )  # fmt: skip
    assert cluster.plans[-1].requeue_after == progress_status.PROGRESS_REFRESH_SECONDS
    document = cluster.resource["status"]["progress"]
    assert (document["epochText"], document["eta"], document["etaSeconds"]) == (
        "2/5",
        "1m20s",
        80.0,
    )


def test_the_log_is_read_at_most_every_30_seconds() -> None:
    cluster = running()
    observed = cluster.observed()
    old = crd.status_from_document(cluster.resource["status"])
    assert progress_status.log_wanted(observed, old) is None  # just read
    later = dataclasses.replace(observed, now=T0 + 29 * SECOND)
    assert progress_status.log_wanted(later, old) is None
    due = dataclasses.replace(observed, now=T0 + 30 * SECOND)
    assert (progress_status.log_wanted(due, old) or "").startswith("mnist-worker-0-")
    cluster.chief_log += "\n" + progress_lib.format_line(Progress(3, 5, 1, 469, 0.05, 3500.0, 50))
    cluster.now = T0 + 10 * SECOND
    assert cluster.reconcile().status is None, "not due: nothing read, nothing written"
    cluster.now = T0 + 31 * SECOND
    plan = cluster.reconcile()
    assert plan.status is not None and plan.status.progress is not None
    assert (plan.status.progress.epoch_text, plan.status.progress.eta) == ("3/5", "50s")


def test_no_progress_is_read_before_the_group_runs_or_from_a_chief_that_does_not_run() -> None:
    cluster = Cluster(resource(), chief_log=LOG)
    cluster.settle()  # created, workers not ready
    old = crd.status_from_document(cluster.resource["status"])
    assert old.phase == "Created"
    assert progress_status.log_wanted(cluster.observed(), old) is None
    assert cluster.status.progress is None
    assert cluster.plans[-1].requeue_after is None
    cluster.start_workers()
    cluster.settle()
    for pod in cluster.pods.values():
        pod["status"]["phase"] = "Pending"
    stale = dataclasses.replace(cluster.observed(), now=T0 + 60 * SECOND)
    assert progress_status.log_wanted(stale, cluster.status) is None


def test_a_log_without_progress_writes_nothing_and_still_looks_again() -> None:
    cluster = running(chief_log="12:00:00 [worker 0/2] INFO waiting up to 300s for peers")
    assert cluster.status.progress is None and cluster.status.phase == "Running"
    assert cluster.plans[-1].requeue_after == progress_status.PROGRESS_REFRESH_SECONDS


def test_success_keeps_the_last_progress_and_stops_looking() -> None:
    cluster = running()
    cluster.now += datetime.timedelta(minutes=5)
    cluster.chief_log += "\n" + progress_lib.format_line(Progress(5, 5, 469, 469, 0.01, 3500.0, 0))
    cluster.complete()
    cluster.settle()
    assert cluster.status.phase == "Succeeded"
    assert cluster.status.progress is not None and cluster.status.progress.eta == "0s"
    later = dataclasses.replace(cluster.observed(), now=cluster.now + 60 * SECOND)
    assert progress_status.log_wanted(later, cluster.status) is None
    assert cluster.plans[-1].requeue_after == 86400, "only the TTL's look (a day) is left"


def test_a_hand_edited_progress_is_read_leniently() -> None:
    status = crd.status_from_document(
        {"phase": "Running", "progress": {"epoch": "two", "epochs": 5, "loss": True, "eta": 3}}
    )
    assert status.progress == crd.ProgressStatus(epochs=5)
    assert progress_status.to_progress(status.progress) is None
    assert crd.status_from_document({"progress": "x"}).progress is None
