"""Finding a job's objects: everything tflaunch creates carries the job's labels.

A tflaunch job is not one object but a Service, a NetworkPolicy, one or more Jobs and their
pods; they are found together by `labels.job_selector_string(name)`. `doctor` reads a few
cluster facts beside them (nodes, quotas, endpoint slices), listed here too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from launcher.cluster.client import Cluster, Obj
from launcher.core import admission, labels, reading
from launcher.core.errors import ClusterError, Forbidden, NotFound

JOB_KINDS = ("Job", "Service", "NetworkPolicy", "Pod")
"""Everything a tflaunch job consists of, found by its labels (pods by their template's)."""


@dataclasses.dataclass(frozen=True)
class JobObjects:
    """Every object of one tflaunch job, as plain dicts, at one moment."""

    name: str
    namespace: str
    jobs: tuple[Obj, ...] = ()
    pods: tuple[Obj, ...] = ()
    services: tuple[Obj, ...] = ()
    network_policies: tuple[Obj, ...] = ()

    @property
    def exists(self) -> bool:
        return bool(self.jobs or self.pods or self.services or self.network_policies)

    def all(self) -> list[Obj]:
        return [*self.jobs, *self.services, *self.network_policies, *self.pods]


def job_objects(cluster: Cluster, name: str, namespace: str | None = None) -> JobObjects:
    """Every object of job `name` (Jobs, Pods, Service, NetworkPolicy) by its labels."""
    ns = cluster.ns(namespace)
    selector = labels.job_selector_string(name)
    return JobObjects(
        name,
        ns,
        jobs=tuple(cluster.list_objects("Job", ns, selector)),
        pods=tuple(cluster.list_objects("Pod", ns, selector)),
        services=tuple(cluster.list_objects("Service", ns, selector)),
        network_policies=tuple(cluster.list_objects("NetworkPolicy", ns, selector)),
    )


def jobs_of(cluster: Cluster, name: str, namespace: str | None = None) -> list[Obj]:
    """The Kubernetes Jobs of job `name` alone (`job_objects` without the other kinds)."""
    return cluster.list_objects("Job", cluster.ns(namespace), labels.job_selector_string(name))


def managed_jobs(
    cluster: Cluster,
    namespace: str | None = None,
    *,
    all_namespaces: bool = False,
    selector: str | None = None,
) -> list[Obj]:
    """Every Job tflaunch manages in a namespace (or all), narrowed by a label `selector`
    (`list -l`: kubectl's syntax, evaluated by the API server); group them by
    `labels.JOB_NAME`."""
    return cluster.list_objects(
        "Job", namespace, managed_selector(selector), all_namespaces=all_namespaces
    )


def managed_selector(selector: str | None = None) -> str:
    """tflaunch's own Jobs, and of those the ones `selector` picks (the server ANDs them)."""
    managed = labels.managed_selector_string()
    return f"{managed},{selector}" if selector and selector.strip() else managed


def job_events(cluster: Cluster, job: str, namespace: str | None = None) -> list[Obj]:
    """The events recorded about one Kubernetes Job (e.g. the Job controller's FailedCreate
    when a ResourceQuota, LimitRange or webhook refuses its pods), oldest first."""
    found = cluster.list_objects(
        "Event", namespace, field_selector=f"involvedObject.kind=Job,involvedObject.name={job}"
    )
    return sorted(found, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


def pod_warnings(cluster: Cluster, pod: str, namespace: str | None = None) -> list[Obj]:
    """The Warning events recorded about one pod (e.g. the kubelet's FailedMount), oldest
    first."""
    found = cluster.list_objects(
        "Event",
        namespace,
        field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod},type=Warning",
    )
    return sorted(found, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


def warnings_of(cluster: Cluster, pods: Iterable[str], namespace: str) -> dict[str, list[Obj]]:
    """`pod_warnings` of each pod; none for a pod whose events cannot be read (no RBAC to
    list events: the ordinary pending warning stays)."""
    found: dict[str, list[Obj]] = {}
    for pod in pods:
        try:
            found[pod] = pod_warnings(cluster, pod, namespace)
        except ClusterError:
            found[pod] = []
    return found


WORKLOAD = "Workload.kueue.x-k8s.io"


def workloads(
    cluster: Cluster, jobs: Sequence[Mapping[str, Any]], held_only: bool = True
) -> list[Obj] | None:
    """Kueue's Workloads of the Jobs it holds back (`admission.held`), or of every queued one
    (`admission.queued`, with `held_only` False), found by the Job-uid label Kueue gives
    them; None when they cannot be read (Kueue's CRDs are not installed, or this user may
    not list them)."""
    found: list[Obj] = []
    for job in admission.held(jobs) if held_only else admission.queued(jobs):
        meta = reading.meta(job)
        selector = f"{admission.JOB_UID_LABEL}={meta.get('uid')}"
        try:
            found += cluster.list_objects(WORKLOAD, meta.get("namespace"), selector)
        except (NotFound, Forbidden):
            return None
    return found


# --- What doctor reads beside the job ---------------------------------------------------


def nodes(cluster: Cluster) -> list[Obj]:
    return cluster.list_objects("Node")


def resource_quotas(cluster: Cluster, namespace: str | None = None) -> list[Obj]:
    return cluster.list_objects("ResourceQuota", namespace)


def endpoint_slices(cluster: Cluster, service: str, namespace: str | None = None) -> list[Obj]:
    """The EndpointSlices of a Service (selected by `kubernetes.io/service-name`)."""
    return cluster.list_objects("EndpointSlice", namespace, f"kubernetes.io/service-name={service}")


def checkpoint_run(cluster: Cluster, name: str, namespace: str | None = None) -> str | None:
    """The checkpoint run the existing Jobs of job `name` write (`labels.CHECKPOINT_RUN`),
    so that resubmitting it keeps the run; None when it has no Jobs, "" when they have no
    run (an older tflaunch's, whose checkpoints are per job name)."""
    jobs = cluster.list_objects("Job", cluster.ns(namespace), labels.job_selector_string(name))
    for job in sorted(jobs, key=lambda j: str(j["metadata"].get("name"))):
        run = reading.annotations_of(job).get(labels.CHECKPOINT_RUN)
        if run:
            return str(run)
    return "" if jobs else None
