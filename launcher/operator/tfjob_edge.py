"""The TFJob edge of the operator (`tflaunch operator --tfjobs managed|all`): kopf says a
TFJob (or the MultiWorkerJob it owns) changed (`launcher.operator.controller.serve_tfjobs`,
registered only with `--tfjobs`, so an operator on a cluster without the TFJob CRD never
watches it), `tfjobs.decide()` says what to do. One reconcile reads the TFJob, its
MultiWorkerJob and the worker pods afresh, applies the MultiWorkerJob when the TFJob's spec
is newer, and writes the TFJob's status; the MultiWorkerJob's own reconcile
(`launcher.operator.controller`) runs the workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging

from launcher.cluster.client import Cluster
from launcher.cluster.operated import MULTIWORKERJOB, TFJOB
from launcher.core import labels
from launcher.core.errors import ClusterError, NotFound
from launcher.operator import tfjobs

logger = logging.getLogger("tflaunch.operator")


def reconcile_tfjob(
    cluster: Cluster,
    namespace: str,
    name: str,
    serve: tfjobs.Serve,
    now: datetime.datetime | None = None,
) -> tfjobs.TFJobPlan:
    """Observe one TFJob, decide, and carry the plan out (nothing for a TFJob not served)."""
    resource = cluster.get(TFJOB, name, namespace)
    if resource is None or not tfjobs.served(resource, serve):
        return tfjobs.TFJobPlan()
    child = cluster.get(MULTIWORKERJOB, name, namespace)
    pods = cluster.list_objects("Pod", namespace, labels.job_selector_string(name))
    plan = tfjobs.decide(resource, child, pods, now or datetime.datetime.now(datetime.timezone.utc))
    if plan.apply is not None:
        cluster.apply(plan.apply, kind=MULTIWORKERJOB)
    if plan.status is not None:
        with contextlib.suppress(NotFound):  # deleted meanwhile: its MultiWorkerJob goes too
            cluster.merge_patch(
                TFJOB, name, namespace, {"status": plan.status}, subresource="status"
            )
    return plan


class TFJobs:
    """Runs TFJob reconciles on kopf's event loop, one at a time per TFJob (its own event
    and its MultiWorkerJob's may come together)."""

    def __init__(self, cluster: Cluster, serve: tfjobs.Serve) -> None:
        self.cluster = cluster
        self.serve = serve
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def trigger(self, namespace: str, name: str) -> None:
        lock = self._locks.setdefault((namespace, name), asyncio.Lock())
        async with lock:
            try:
                await asyncio.to_thread(reconcile_tfjob, self.cluster, namespace, name, self.serve)
            except ClusterError as error:  # its MultiWorkerJob's next status change retries
                logger.warning("TFJob %s/%s: %s", namespace, name, error)
