"""Pods and Job statuses as the Job controller and the kubelet would write them."""

from __future__ import annotations

import copy
import datetime
from typing import Any

from launcher.core import labels

Obj = dict[str, Any]


def stamp(seconds_ago: float = 0) -> str:
    moment = datetime.datetime.now(tz=datetime.timezone.utc) - datetime.timedelta(
        seconds=seconds_ago
    )
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_for(
    job: Obj,
    index: int,
    *,
    attempt: int = 0,
    phase: str = "Running",
    node: str | None = "node-1",
    age: float = 60,
    waiting: tuple[str, str] | None = None,
    exit_code: int | None = None,
    reason: str | None = None,
    unschedulable: str | None = None,
    ip: str | None = None,
) -> Obj:
    """Worker `index`'s pod (attempt `attempt`) made from `job`'s template, in a given state."""
    template = copy.deepcopy(job["spec"]["template"])
    indexed = job["spec"].get("completionMode") == "Indexed"
    meta = template["metadata"]
    suffix = f"{index}-a{attempt}" if indexed else f"a{attempt}"
    meta["name"] = f"{job['metadata']['name']}-{suffix}"
    meta["namespace"] = job["metadata"]["namespace"]
    meta["creationTimestamp"] = stamp(age)
    meta.setdefault("labels", {})["batch.kubernetes.io/job-name"] = job["metadata"]["name"]
    if indexed:
        meta["labels"][labels.COMPLETION_INDEX] = str(index)
        meta.setdefault("annotations", {})[labels.COMPLETION_INDEX] = str(index)
    spec = template["spec"]
    if indexed:
        spec["hostname"] = f"{job['metadata']['name']}-{index}"
    if node and not unschedulable:
        spec["nodeName"] = node
    container: Obj = {"name": "trainer", "ready": phase == "Running", "restartCount": 0}
    if waiting:
        container["state"] = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
    elif phase == "Running":
        container["state"] = {"running": {"startedAt": stamp(age)}}
    elif phase in ("Succeeded", "Failed"):
        code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
        container["state"] = {
            "terminated": {
                "exitCode": code,
                "reason": reason or ("Completed" if code == 0 else "Error"),
                "startedAt": stamp(age),
                "finishedAt": stamp(max(0.0, age - 30)),
            }
        }
    else:
        container["state"] = {"waiting": {"reason": "ContainerCreating"}}
    status: Obj = {"phase": phase}
    if unschedulable:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": unschedulable,
            }
        ]
    else:
        status["containerStatuses"] = [container]
    if ip:
        status["podIP"] = ip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def with_condition(job: Obj, kind: str, reason: str = "", message: str = "") -> Obj:
    """`job` with a True condition (Complete, Failed, Suspended...)."""
    job = copy.deepcopy(job)
    condition = {"type": kind, "status": "True", "reason": reason, "message": message}
    job.setdefault("status", {}).setdefault("conditions", []).append(condition)
    return job


def with_active(job: Obj, active: int) -> Obj:
    job = copy.deepcopy(job)
    job.setdefault("status", {})["active"] = active
    return job


def gpu_node(name: str, gpus: int = 0) -> Obj:
    allocatable = {"cpu": "8", "memory": "32Gi"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": allocatable},
    }
