"""A child's name held by someone else's object (the pure decision; the 409 and the owner
check run against the real API server in tests/e2e/test_operator.py)."""

from __future__ import annotations

import dataclasses

from launcher.operator import crd
from launcher.operator.reconcile import name_taken
from tests.operator.sim import Cluster, resource


def test_a_taken_name_fails_with_name_conflict_once_and_is_retried() -> None:
    cluster = Cluster(resource())
    observed = cluster.observed()

    plan = name_taken(observed, "Service mnist")

    assert plan.status is not None and plan.status.phase == "Failed"
    assert plan.status.reason == "NameConflict"
    assert plan.status.restarts == 0
    assert "Service mnist already exists" in (plan.status.message or "")
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "NameConflict")]
    assert not plan.create and not plan.delete_jobs
    assert plan.requeue_after

    failed = dict(observed.resource, status=crd.document_of(plan.status))
    again = name_taken(dataclasses.replace(observed, resource=failed), "Service mnist")
    assert again.status is None and again.events == (), "said once, not every retry"
