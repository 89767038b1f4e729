"""TF_CONFIG, built in one place for every pod and every local worker.

MultiWorkerMirroredStrategy requires every worker to see the same `cluster.worker` list,
in the same order, and its own distinct `task.index`. Everything that sets TF_CONFIG (the
templates, `tflaunch local`, `tflaunch tfconfig`, `doctor`) calls these functions, so there
is only one way for it to be built.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from launcher.api.spec import MultiWorkerJob
from launcher.core import contract, names

TASK_TYPE = "worker"
INDEX_PLACEHOLDER = f"$({contract.ENV_WORKER_INDEX})"
"""Kubernetes expands `$(VAR)` in env values from env vars declared before; the Indexed Job
fills WORKER_INDEX from the pod's completion-index annotation."""


def cluster_spec(addresses: Sequence[str]) -> dict[str, list[str]]:
    """`{"worker": [host:port, ...]}` in index order."""
    return {TASK_TYPE: list(addresses)}


def job_addresses(job: MultiWorkerJob) -> list[str]:
    """Each worker's `fqdn:port` as the headless Service resolves it in the cluster."""
    return [
        f"{names.worker_fqdn(job.name, i, job.namespace, job.spec.cluster_domain)}:{job.spec.port}"
        for i in range(job.spec.workers)
    ]


def tf_config(cluster: dict[str, list[str]], index: int) -> dict[str, Any]:
    """The TF_CONFIG of worker `index`."""
    if not 0 <= index < len(cluster[TASK_TYPE]):
        raise ValueError(f"worker index {index} outside 0..{len(cluster[TASK_TYPE]) - 1}")
    return {"cluster": cluster, "task": {"type": TASK_TYPE, "index": index}}


def tf_config_json(cluster: dict[str, list[str]], index: int | None) -> str:
    """TF_CONFIG serialized once. With `index=None` the index is left for Kubernetes to fill:
    the JSON then holds `$(WORKER_INDEX)` as a bare number, which is valid once expanded."""
    if index is not None:
        return json.dumps(tf_config(cluster, index), separators=(",", ":"))
    marker = -1  # serialized as a number, then swapped for the placeholder
    text = json.dumps(
        {"cluster": cluster, "task": {"type": TASK_TYPE, "index": marker}}, separators=(",", ":")
    )
    return text.replace('"index":-1}', f'"index":{INDEX_PLACEHOLDER}}}')


def job_tf_config(job: MultiWorkerJob, index: int) -> dict[str, Any]:
    """Exactly the TF_CONFIG worker `index` of `job` receives in the cluster."""
    return tf_config(cluster_spec(job_addresses(job)), index)
