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
