"""Reading plain Kubernetes objects as the operator's decisions need them.

Pure helpers over dicts as the API server sends them: names, conditions, annotations, times,
and how a worker ended (its trainer container's terminated state, its result line). Kept
apart from the decisions so that each rule in `launcher.operator.reconcile` reads as a rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from launcher.core import contract, labels, untrusted

K8sObject = dict[str, Any]


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def name_of(obj: Mapping[str, Any]) -> str:
    return str(meta_of(obj).get("name", ""))


def terminating(obj: Mapping[str, Any]) -> bool:
    return bool(meta_of(obj).get("deletionTimestamp"))


def true_condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The object's status condition `kind` when it is True."""
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


def job_failed(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    # FailureTarget (Kubernetes >= 1.31) comes before Failed, while pods still terminate.
    return true_condition(job, "Failed") or true_condition(job, "FailureTarget")


def job_complete(job: Mapping[str, Any]) -> bool:
    return true_condition(job, "Complete") is not None


def job_suspended(job: Mapping[str, Any]) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def annotation_of(obj: Mapping[str, Any], key: str) -> str | None:
    value = (meta_of(obj).get("annotations") or {}).get(key)
    return None if value is None else str(value)


@dataclasses.dataclass(frozen=True)
class WorkerExit:
    """How one worker pod ended (its trainer container's terminated state)."""

    worker: int | None
    pod: str
    exit_code: int | None
    reason: str
    message: str

    def describe(self) -> str:
        who = f"worker {self.worker}" if self.worker is not None else "a worker"
        how = f"exited with code {self.exit_code}" if self.exit_code is not None else "failed"
        detail = self.message.strip().splitlines()[-1] if self.message.strip() else self.reason
        return f"{who} (pod {self.pod}) {how}" + (f": {detail}" if detail else "")


def terminated_state(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The trainer container's terminated state (current, else the last one)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        if status.get("name") != "trainer":
            continue
        for key in ("state", "lastState"):
            terminated = (status.get(key) or {}).get("terminated")
            if terminated:
                return dict(terminated)
    return None


def pod_worker_index(pod: Mapping[str, Any]) -> int | None:
    meta = meta_of(pod)
    return labels.worker_index_of(meta.get("labels") or {}, meta.get("annotations") or {})


def failed_workers(pods: Iterable[Mapping[str, Any]]) -> list[WorkerExit]:
    """Workers whose trainer exited non-zero (or whose pod failed), by worker index."""
    exits = []
    for pod in pods:
        terminated = terminated_state(pod)
        phase = (pod.get("status") or {}).get("phase")
        code = terminated.get("exitCode") if terminated else None
        if (code is None or code == 0) and phase != "Failed":
            continue
        if code == contract.EXIT_PREEMPTED:
            continue  # saved first; the Job ignores it (launcher.operator.preemptions)
        exits.append(
            WorkerExit(
                worker=pod_worker_index(pod),
                pod=name_of(pod),
                exit_code=code,
                reason=str(
                    (terminated or {}).get("reason")
                    or (pod.get("status") or {}).get("reason")
                    or ""
                ),
                message=untrusted.cut(str((terminated or {}).get("message") or "")),
            )
        )
    return sorted(exits, key=lambda e: (e.worker is None, e.worker or 0, e.pod))


def parse_result(text: str | None) -> dict[str, Any] | None:
    """The chief's result from its last `TFLAUNCH_RESULT {json}` line, if there is one."""
    for line in reversed((text or "").splitlines()):
        at = line.find(contract.RESULT_LINE_PREFIX)
        if at < 0:
            continue
        value = untrusted.json_object(line[at + len(contract.RESULT_LINE_PREFIX) :])
        if value is not None:
            return value
    return None


def chief_pod(pods: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Worker 0's pod, preferring one that succeeded."""
    chiefs = [p for p in pods if pod_worker_index(p) == 0]
    chiefs.sort(key=lambda p: (p.get("status") or {}).get("phase") != "Succeeded")
    return chiefs[0] if chiefs else None


def owned_by(obj: Mapping[str, Any], uids: Iterable[str]) -> bool:
    wanted = set(uids)
    return any(ref.get("uid") in wanted for ref in meta_of(obj).get("ownerReferences") or ())
