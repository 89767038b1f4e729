"""TF_CONFIG, built in one place for every pod and every local worker.

MultiWorkerMirroredStrategy requires every worker to see the same cluster, in the same
order, and its own distinct task. Everything that sets TF_CONFIG (the templates, `tflaunch
local`, `tflaunch tfconfig`, `doctor`) calls these functions, so there is only one way for
it to be built.

tflaunch numbers the group's members 0..N-1 (its worker index); TF_CONFIG names each one
by a task. By default every member is task `worker` i. With `spec.tfConfig.chief` (a
Kubeflow TFJob's Chief or Master), member 0 is task `chief` 0 and member i is `worker`
i-1, as training-operator names them; the group order is `contract.TF_CONFIG_GROUP_JOBS`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from launcher.api.spec import MultiWorkerJob, TFConfigShape
from launcher.core import contract, names

TASK_TYPE = "worker"
INDEX_PLACEHOLDER = f"$({contract.ENV_WORKER_INDEX})"
"""Kubernetes expands `$(VAR)` in env values from env vars declared before; the Indexed Job
fills WORKER_INDEX from the pod's completion-index annotation."""
DEFAULT_SHAPE = TFConfigShape()

Cluster = dict[str, list[str]]


def cluster_spec(addresses: Sequence[str], shape: TFConfigShape = DEFAULT_SHAPE) -> Cluster:
    """`{"worker": [host:port, ...]}` in index order; with a chief, member 0's address under
    `chief` (or `master`) and the rest under `worker`, keys sorted as training-operator's
    JSON has them."""
    if not shape.chief:
        return {TASK_TYPE: list(addresses)}
    cluster = {shape.chief: list(addresses[:1]), TASK_TYPE: list(addresses[1:])}
    return {key: cluster[key] for key in sorted(cluster) if cluster[key]}


def group_addresses(cluster: Mapping[str, Any]) -> list[Any]:
    """Every member's address in group order (tflaunch's worker index)."""
    return [a for job in contract.TF_CONFIG_GROUP_JOBS for a in cluster.get(job) or []]


def task(cluster: Mapping[str, Any], index: int) -> dict[str, Any]:
    """TF_CONFIG's task of member `index`: `{"type": ..., "index": ...}`."""
    total = len(group_addresses(cluster))
    if not 0 <= index < total:
        raise ValueError(f"worker index {index} outside 0..{total - 1}")
    for job in contract.TF_CONFIG_GROUP_JOBS:
        size = len(cluster.get(job) or [])
        if index < size:
            return {"type": job, "index": index}
        index -= size
    raise AssertionError("unreachable: index checked against the group's size")


def job_addresses(job: MultiWorkerJob) -> list[str]:
    """Each worker's `fqdn:port` as the headless Service resolves it in the cluster."""
    return [
        f"{names.worker_fqdn(job.name, i, job.namespace, job.spec.cluster_domain)}:{job.spec.port}"
        for i in range(job.spec.workers)
    ]


def tf_config(cluster: Cluster, index: int, shape: TFConfigShape = DEFAULT_SHAPE) -> dict[str, Any]:
    """The TF_CONFIG of worker `index`."""
    config: dict[str, Any] = {"cluster": cluster, "task": task(cluster, index)}
    if shape.environment:
        config["environment"] = shape.environment
    return config


def tf_config_json(
    cluster: Cluster, index: int | None, shape: TFConfigShape = DEFAULT_SHAPE
) -> str:
    """TF_CONFIG serialized once. With `index=None` the index is left for Kubernetes to fill:
    the JSON then holds `$(WORKER_INDEX)` as a bare number, which is valid once expanded (every
    member is then a `worker`: a chief's TF_CONFIG differs by more than the index, which is why
    it needs the per-worker layout)."""
    if index is not None:
        return json.dumps(tf_config(cluster, index, shape), separators=(",", ":"))
    if set(cluster) != {TASK_TYPE}:
        raise ValueError("a TF_CONFIG with a chief cannot be filled in by Kubernetes")
    marker = -1  # serialized as a number, then swapped for the placeholder
    config: dict[str, Any] = {"cluster": cluster, "task": {"type": TASK_TYPE, "index": marker}}
    if shape.environment:
        config["environment"] = shape.environment
    text = json.dumps(config, separators=(",", ":"))
    return text.replace('"index":-1}', f'"index":{INDEX_PLACEHOLDER}}}')


def job_tf_config(job: MultiWorkerJob, index: int) -> dict[str, Any]:
    """Exactly the TF_CONFIG worker `index` of `job` receives in the cluster."""
    shape = job.spec.tf_config
    return tf_config(cluster_spec(job_addresses(job), shape), index, shape)
