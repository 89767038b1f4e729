"""Preemptions the workers saved before (exit 79): recorded, never a restart (pure)."""

from __future__ import annotations

import copy
import datetime

from launcher.api.status import describe_preemptions
from launcher.core import contract
from launcher.core.timestamps import format_time
from launcher.operator import crd, preemptions
from tests.operator.sim import T0, Cluster, resource

SAVED = (
    "preempted: every worker saved at step 70 (epoch 2, step 30 of 40); exiting 79 so that "
    "the group restarts and resumes there"
)


def _pod(name: str, finished: datetime.datetime, code: int = 79, message: str = SAVED) -> dict:
    return {
        "metadata": {"name": name},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "state": {
                        "terminated": {
                            "exitCode": code,
                            "finishedAt": format_time(finished),
                            "message": message,
                        }
                    },
                }
            ],
        },
    }


def test_the_workers_of_one_preemption_count_once_and_counting_again_changes_nothing():
    s = datetime.timedelta(seconds=1)
    pods = [_pod("w0-a", T0), _pod("w1-a", T0 + 3 * s, message="")]
    once = preemptions.record(crd.Status(), pods, grace_seconds=60)
    assert (once.preemptions, once.resumed_at_step) == (1, 70)
    assert preemptions.record(once, pods, grace_seconds=60) == once
    later = [*pods, _pod("w0-b", T0 + 120 * s, message=SAVED.replace("70", "95"))]
    twice = preemptions.record(once, later, grace_seconds=60)
    assert (twice.preemptions, twice.resumed_at_step) == (2, 95)
    assert describe_preemptions(twice) == (
        "preempted 2 times (every worker saved first; not a restart), resumed at step 95"
    )


def test_other_exits_are_not_preemptions():
    pods = [_pod("w0", T0, code=1), _pod("w1", T0, code=137), _pod("w2", T0, code=0)]
    assert preemptions.record(crd.Status(), pods, grace_seconds=60) == crd.Status()
    assert describe_preemptions(crd.Status()) == ""


def _preempt(cluster: Cluster, suffix: str) -> None:
    """Every worker exits 79 and the Job (podFailurePolicy Ignore) replaces its pod: the Job
    neither fails nor counts the pod."""
    for name, pod in list(cluster.pods.items()):
        if pod["status"].get("phase") != "Running":
            continue
        ended = copy.deepcopy(pod)
        ended["metadata"]["name"] = f"{name}-{suffix}"
        ended["status"] = _pod(name, cluster.now)["status"]
        cluster.pods[ended["metadata"]["name"]] = ended


def test_a_preempted_group_is_recorded_not_restarted_and_the_status_says_where_it_resumed():
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    _preempt(cluster, "gone")
    plan = cluster.reconcile()
    assert plan.delete_jobs == () and plan.create == ()
    status = cluster.status
    assert (status.restarts, status.preemptions, status.resumed_at_step) == (0, 1, 70)
    assert status.phase == "Running"
    assert status.message.endswith("resumed at step 70"), status.message
    assert [e.reason for e in plan.events] == ["Preempted"]
    assert cluster.reconcile().status is None  # recorded once: nothing more to write

    cluster.now += datetime.timedelta(minutes=5)
    _preempt(cluster, "gone-again")
    cluster.reconcile()
    assert (cluster.status.restarts, cluster.status.preemptions) == (0, 2)


def test_a_real_failure_after_a_preemption_names_the_failed_worker_not_the_preempted_one():
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    _preempt(cluster, "gone")
    cluster.reconcile()
    cluster.fail_worker(1, exit_code=1, message="a peer died")
    cluster.reconcile()
    assert cluster.status.phase == "Restarting"
    assert (cluster.status.restarts, cluster.status.preemptions) == (1, 1)
    assert "exit code 79" not in cluster.status.message and "a peer died" in cluster.status.message
    assert contract.EXIT_PREEMPTED  # the code the pods above ended with
