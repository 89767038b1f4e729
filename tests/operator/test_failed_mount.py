"""A volume that does not mount (issue 40): the operator reads the pod's FailedMount event,
as `tflaunch wait` does, and says it in the same words in its WorkersCannotStart condition."""

from __future__ import annotations

from launcher.core import never_starts
from tests.operator.sim import Cluster, resource

MESSAGE = (
    'MountVolume.SetUp failed for volume "pv-missing" : hostPath type check failed: '
    "/nosuch is not a directory"
)


def test_a_volume_that_does_not_mount_sets_workers_cannot_start_in_waits_words() -> None:
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()
    for pod in cluster.pods.values():
        pod["status"] = {"phase": "Pending", "containerStatuses": [{"name": "trainer", "state": {
            "waiting": {"reason": "ContainerCreating"}}}]}  # fmt: skip
    for job in cluster.jobs.values():
        job["status"] = {"active": 2, "ready": 0}
    first = sorted(cluster.pods)[0]
    cluster.pod_warnings = {first: [{"type": "Warning", "reason": "FailedMount",
                                     "message": MESSAGE}]}  # fmt: skip

    cluster.reconcile()

    assert cluster.status.reason == "WorkersCannotStart"
    end = never_starts.dead_end("FailedMount", MESSAGE)
    assert end is not None
    assert never_starts.sentence(0, end, MESSAGE) in cluster.status.message, cluster.status.message
    assert "spec.checkpoint.claimName" in cluster.status.message
