"""The decisions behind issue 27's operator items, on plain data (the real control plane
proves them in tests/e2e/test_operator_hardening.py): orphaned pods hold a new group back, a
deleted Service or NetworkPolicy is created again, pods the Job controller cannot create are
reported with the server's reason."""

from __future__ import annotations

import dataclasses

from launcher.operator.plan import STALL_POLL_SECONDS
from launcher.operator.reconcile import decide
from tests.operator.sim import Cluster, resource


def _running() -> Cluster:
    cluster = Cluster(resource())
    cluster.reconcile()
    cluster.start_workers()
    cluster.settle()
    assert cluster.status.phase == "Running"
    return cluster


def test_pods_left_by_an_orphaning_delete_hold_the_new_group_back_until_they_are_gone() -> None:
    cluster = _running()
    cluster.jobs.clear()  # kubectl delete job --cascade=orphan: the pods lose their owner
    for pod in cluster.pods.values():
        pod["metadata"]["ownerReferences"] = []

    plan = cluster.reconcile()

    assert plan.create == ()
    assert cluster.status.reason == "OrphanedPods"
    assert all(name in (cluster.status.message or "") for name in cluster.pods)
    assert plan.requeue_after == STALL_POLL_SECONDS
    assert [e.reason for e in plan.events] == ["OrphanedPods"]
    assert cluster.reconcile().events == ()  # said once
    cluster.pods.clear()
    assert [o["kind"] for o in cluster.reconcile().create][-1] == "Job"


def test_a_deleted_service_and_network_policy_are_created_again_while_the_group_runs() -> None:
    cluster = _running()
    observed = dataclasses.replace(cluster.observed(), others=list(cluster.others.values()))
    assert decide(observed).create == ()
    kept = [o for o in cluster.others.values() if o["kind"] not in ("Service", "NetworkPolicy")]

    plan = decide(dataclasses.replace(observed, others=kept))

    assert sorted(o["kind"] for o in plan.create) == ["NetworkPolicy", "Service"]
    assert [e.reason for e in plan.events] == ["Restored"]


def test_pods_the_job_controller_cannot_create_are_reported_with_its_reason() -> None:
    cluster = Cluster(resource())
    cluster.reconcile()
    why = 'FailedCreate: pods "mnist-worker-0-x" is forbidden: exceeded quota: small'
    observed = dataclasses.replace(cluster.observed(), blocked={"mnist-worker": why})

    plan = decide(observed)

    assert plan.status is not None and plan.status.reason == "PodsNotCreated"
    assert "Job mnist-worker cannot create its pods: " + why in (plan.status.message or "")
    assert [e.reason for e in plan.events] == ["PodsNotCreated"]
    assert plan.requeue_after == STALL_POLL_SECONDS
    unknown = decide(dataclasses.replace(observed, blocked={"mnist-worker": ""}))
    assert unknown.requeue_after == STALL_POLL_SECONDS  # no reason yet: look again


def test_a_worker_that_will_never_start_is_said_in_waits_words_and_the_group_keeps_waiting():
    """`tflaunch wait` ends with exit 5 on an absent image; the operator's status said only
    "waiting for the workers: 0/2 ready" (issue 40). It says why at once, with an event,
    and keeps waiting: the image may be loaded, the Secret created."""
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()  # their pods exist, and then wait on the image
    message = 'Container image "tflaunch-trainer:nosuch" is not present with pull policy of Never'
    for pod in cluster.pods.values():
        pod["status"] = {"phase": "Pending", "containerStatuses": [{"name": "trainer", "state": {
            "waiting": {"reason": "ErrImageNeverPull", "message": message}}}]}  # fmt: skip
    for job in cluster.jobs.values():
        job["status"] = {"active": 2, "ready": 0}
    plan = cluster.reconcile()
    assert cluster.status.phase == "Created" and cluster.status.reason == "WorkersCannotStart"
    assert cluster.status.message.endswith(
        f'; worker 0 will never start: image "tflaunch-trainer:nosuch" (ErrImageNeverPull: '
        f"{message}); it is not on the node and spec.imagePullPolicy is Never: load the image "
        "into every node (kind load, ctr images import) or push it to a registry and set "
        "spec.imagePullPolicy: IfNotPresent; worker 1 will never start: " + "image"
        f' "tflaunch-trainer:nosuch" (ErrImageNeverPull: {message}); it is not on the node '
        "and spec.imagePullPolicy is Never: load the image into every node (kind load, ctr "
        "images import) or push it to a registry and set spec.imagePullPolicy: IfNotPresent"
    ), cluster.status.message
    assert [e.reason for e in plan.events] == ["WorkersCannotStart"]
    assert plan.requeue_after == STALL_POLL_SECONDS and plan.delete_jobs == ()
    assert cluster.reconcile().events == ()  # said once
    cluster.start_workers()  # loaded at last
    cluster.settle()
    assert cluster.status.phase == "Running"


def _oom_killed(cluster: Cluster, worker: int) -> None:
    cluster.fail_worker(worker, 137, reason="OOMKilled")
    cluster.settle()


def test_the_same_worker_oom_killed_twice_in_a_row_stops_the_job_with_the_advice() -> None:
    """The same limit and batch kill it at the same point again: restarting until the
    budget is spent only costs the time back to the checkpoint each time (issue 40)."""
    cluster = _running()
    _oom_killed(cluster, 1)
    assert cluster.status.restarts == 1 and cluster.status.last_failure == "1 OOMKilled"
    cluster.start_workers()
    cluster.settle()
    _oom_killed(cluster, 1)
    assert (cluster.status.phase, cluster.status.reason) == ("Failed", "OOMKilledAgain")
    assert cluster.status.message.startswith("worker 1 was OOMKilled (exit 137)")
    assert "raise spec.resources.limits.memory or lower spec.trainer.globalBatchSize" in (
        cluster.status.message
    )
    assert cluster.status.message.endswith(
        "; OOM-killed again, as before: not retried, it would be killed at the same point again"
    )
    assert cluster.status.restarts == 1


def test_an_oom_kill_of_another_worker_restarts_the_group_as_usual() -> None:
    cluster = _running()
    _oom_killed(cluster, 1)
    cluster.start_workers()
    cluster.settle()
    _oom_killed(cluster, 0)
    assert cluster.status.restarts == 2 and cluster.status.last_failure == "0 OOMKilled"
