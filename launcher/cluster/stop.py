"""Stop a plain job's worker group for good, through the Job controller's own failure path.

A Job whose backoffLimit drops below its failed pods fails at once: the controller deletes
its running pods, keeps the failed ones (and their logs) and sets Failed/BackoffLimitExceeded.
So one merge patch per Job (its backoffLimit 0, and why in `labels.STOPPED`, which `status`
reads) stops the group as the operator's `outcome.fail` stops a MultiWorkerJob's, without
deleting anything. Each patch is whole or not at all; the Job of the worker to blame goes
first, so once it is patched the group has failed whatever happens to the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from launcher.core import labels, reading

if TYPE_CHECKING:
    from launcher.cluster.client import Cluster
    from launcher.cluster.status import Obj


def fail_jobs(
    cluster: Cluster, jobs: Sequence[Obj], namespace: str, reason: str, message: str
) -> list[str]:
    """Fail every unfinished Job of `jobs` (the culprit's first) with `reason: message`;
    returns the names patched."""
    stopped = f"{reason}: {message}"
    patched = []
    for job in jobs:
        if reading.job_failed(job) is not None or reading.job_complete(job):
            continue
        patch = {
            "metadata": {"annotations": {labels.STOPPED: stopped}},
            "spec": {"backoffLimit": 0},
        }
        cluster.merge_patch("Job", reading.name(job), namespace, patch)
        patched.append(reading.name(job))
    return patched
