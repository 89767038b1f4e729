"""Names of everything a job creates, in one place.

Both layouts give worker i the same pod hostname, `<job>-worker-<i>`, under the headless
Service `<job>`; that is what makes a worker's DNS name (and so TF_CONFIG) independent of
the layout. In the indexed layout Kubernetes itself names the pods `<job name>-<index>`.
"""

from __future__ import annotations


def service_name(job: str) -> str:
    """The headless Service that gives every worker pod its DNS name."""
    return job


def indexed_job_name(job: str) -> str:
    """The one Indexed Job of the `indexed` layout; its pods' hostnames are `<this>-<i>`."""
    return f"{job}-worker"


def worker_hostname(job: str, index: int) -> str:
    """Pod hostname of worker `index` (set by Kubernetes for Indexed Jobs, by us otherwise)."""
    return f"{indexed_job_name(job)}-{index}"


def per_worker_job_name(job: str, index: int) -> str:
    """The Job of worker `index` in the `per-worker` layout."""
    return worker_hostname(job, index)


def pod_group_name(job: str) -> str:
    """The gang scheduler's PodGroup (spec.gang volcano or coscheduling)."""
    return job


def network_policy_name(job: str) -> str:
    return f"{job}-tf-peers"


def worker_fqdn(job: str, index: int, namespace: str, cluster_domain: str) -> str:
    """Worker `index`'s DNS name from the headless Service: `<host>.<svc>.<ns>.svc.<domain>`."""
    return f"{worker_hostname(job, index)}.{service_name(job)}.{namespace}.svc.{cluster_domain}"


def script_config_map_name(job: str, digest: str) -> str:
    """The ConfigMap that holds spec.script; `digest` (of its content) is part of the name,
    so an edited script changes the pod template, and the ConfigMap can be immutable."""
    return f"{job}-script-{digest[:10]}"
