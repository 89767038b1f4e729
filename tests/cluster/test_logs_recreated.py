"""`logs -f` of a job the operator runs: the operator restarts the group by deleting every
Job and creating it again, so a vanished Job must not end the stream; only the
MultiWorkerJob's end does (`job_logs(..., jobs_recreated=True)`, test double)."""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from launcher.cluster import logs
from launcher.cluster.client import Cluster
from tests.cluster.fakeapi import FakeKubernetes
from tests.cluster.objects import pod_for


def _follow(cluster: Cluster, finished: threading.Event, recreated: bool) -> list[str]:
    return [
        line.text
        for line in logs.job_logs(
            cluster,
            "mnist",
            "default",
            follow=True,
            worker=0,
            finished=lambda _objects: finished.is_set(),
            jobs_recreated=recreated,
        )
        if line.text is not None
    ]


def _restart_the_group(fake: FakeKubernetes, job: dict[str, Any], done: threading.Event) -> None:
    """What the operator does: the failed group's Job and pods go, a new Job's pods come."""
    fake.log("mnist-worker-0-a0", "first group")
    fake.put(pod_for(job, 0, phase="Failed", exit_code=1))
    fake.end_log("mnist-worker-0-a0")
    fake.remove("Pod", "mnist-worker-0-a0")
    fake.remove("Job", "mnist-worker")
    time.sleep(1.0)  # the operator waits until the old group is gone (foreground deletion)
    again = copy.deepcopy(job)
    again["metadata"].pop("resourceVersion", None)
    again["metadata"]["uid"] = "uid-of-the-second-group"
    fake.put(again)
    fake.put(pod_for(again, 0, attempt=1, age=1))
    fake.log("mnist-worker-0-a1", "second group")
    fake.end_log("mnist-worker-0-a1")
    done.set()  # the MultiWorkerJob succeeded


def test_a_followed_job_whose_jobs_are_recreated_is_followed_until_its_owner_ends(
    cluster: Cluster, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(pod_for(job, 0))
    finished = threading.Event()
    threading.Timer(0.5, _restart_the_group, (fake, job, finished)).start()

    assert _follow(cluster, finished, recreated=True) == ["first group", "second group"]
