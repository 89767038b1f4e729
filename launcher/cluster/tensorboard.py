"""A job's TensorBoard pod on the cluster: created (or reused), then waited for until ready.

The pod itself is `launcher.core.tensorboard.tensorboard_pod` (pure); this module reads the
job's Jobs, applies the pod and watches it come up, saying why when it does not (an image
that cannot be pulled, a claim that cannot be mounted, a crash).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from launcher.cluster import find
from launcher.cluster.client import Cluster, Obj
from launcher.core import tensorboard
from launcher.core.errors import Conflict, NotFound, WaitTimeout

POLL_SECONDS = 1.0
FATAL_WAITING = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CrashLoopBackOff",
     "CreateContainerConfigError", "CreateContainerError"}
)  # fmt: skip


def ensure_pod(cluster: Cluster, name: str, namespace: str) -> Obj:
    """Apply job `name`'s TensorBoard pod; one left from an earlier submission of the job
    (another owner or image) is replaced. Returns the pod as applied.

    Raises:
        NotFound: no such job.
        NoTensorBoard: the job has no event files another pod can read.
        Conflict: a pod with the name exists and is not this job's TensorBoard.
    """
    jobs = find.job_objects(cluster, name, namespace).jobs
    if not jobs:
        raise NotFound(f"job {name} not found in namespace {namespace}")
    wanted = tensorboard.tensorboard_pod(name, min(jobs, key=lambda j: j["metadata"]["name"]))
    pod_name = wanted["metadata"]["name"]
    existing = cluster.get("Pod", pod_name, namespace)
    if existing is not None:
        meta = existing.get("metadata") or {}
        if (meta.get("labels") or {}).get(tensorboard.FOR_JOB) != name:
            raise Conflict(
                f"pod {pod_name} exists in namespace {namespace} and is not job {name}'s "
                "TensorBoard; delete or rename it"
            )
        image = [c.get("image") for c in existing["spec"]["containers"]]
        owners = [o.get("uid") for o in meta.get("ownerReferences") or ()]
        if owners == [wanted["metadata"]["ownerReferences"][0]["uid"]] and image == [
            c["image"] for c in wanted["spec"]["containers"]
        ]:
            return existing
        cluster.delete("Pod", pod_name, namespace, propagation="Background")
        _until_gone(cluster, pod_name, namespace)
    return cluster.apply(wanted)


def _until_gone(cluster: Cluster, pod: str, namespace: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while cluster.get("Pod", pod, namespace) is not None:
        if time.monotonic() > deadline:
            raise WaitTimeout(f"pod {pod} was not deleted within {timeout:.0f}s")
        time.sleep(POLL_SECONDS)


def why_not_ready(pod: Obj) -> tuple[bool, str | None]:
    """(ready, reason it is not): the reason is None while it may still come up, and says
    what is wrong when it will not without help."""
    status = pod.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or ()}
    if (conditions.get("Ready") or {}).get("status") == "True":
        return True, None
    if status.get("phase") in ("Failed", "Succeeded"):
        return False, f"the pod ended ({status.get('phase')}): {status.get('message') or ''}"
    for container in status.get("containerStatuses") or ():
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING:
            return False, f"{waiting['reason']}: {waiting.get('message') or ''}".strip(": ")
    scheduled = conditions.get("PodScheduled") or {}
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        return False, f"Unschedulable: {scheduled.get('message') or ''}"
    return False, None


def wait_ready(
    cluster: Cluster,
    pod: str,
    namespace: str,
    timeout: float,
    sleep: Callable[[float], None] = time.sleep,
) -> Obj:
    """Until the pod is Ready (TensorBoard listens: its readiness probe).

    Raises:
        WaitTimeout: not ready in time, or it will not be (the reason says why).
    """
    deadline = time.monotonic() + timeout
    while True:
        current = cluster.get("Pod", pod, namespace)
        if current is None:
            raise NotFound(f"pod {pod} disappeared (was the job deleted?)")
        ready, reason = why_not_ready(current)
        if ready:
            return current
        if reason is not None and "Unschedulable" not in reason:
            raise WaitTimeout(f"TensorBoard pod {pod} will not start: {reason}")
        if time.monotonic() > deadline:
            raise WaitTimeout(
                f"TensorBoard pod {pod} not ready after {timeout:.0f}s"
                + (f": {reason}" if reason else "")
                + f"; see kubectl describe pod {pod} -n {namespace}"
            )
        sleep(POLL_SECONDS)
