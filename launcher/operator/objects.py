"""Reading plain Kubernetes objects as the operator's decisions need them.

Pure helpers over dicts as the API server sends them: names, annotations, ownership and the
chief's result line. How a Job or a worker ended is read in `launcher.core.reading`, the one
reading the CLI and local mode share. Kept apart from the decisions so that each rule in
`launcher.operator.reconcile` reads as a rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from launcher.core import contract, reading, untrusted

K8sObject = dict[str, Any]


meta_of = reading.meta
name_of = reading.name
terminating = reading.terminating


def suspend_set(job: Mapping[str, Any]) -> bool:
    """Whether the Job's spec.suspend is set (what the operator propagates; a Suspended
    condition without it is `reading.job_suspended`)."""
    return bool(reading.spec(job).get("suspend"))


def annotation_of(obj: Mapping[str, Any], key: str) -> str | None:
    value = reading.annotations_of(obj).get(key)
    return None if value is None else str(value)


def parse_result(text: str | None) -> dict[str, Any] | None:
    """The chief's result from its last `TFLAUNCH_RESULT {json}` line, if there is one: a
    line that starts with the marker (`contract.after_marker`), not one carrying it mid-line."""
    for line in reversed((text or "").splitlines()):
        rest = contract.after_marker(line, contract.RESULT_LINE_PREFIX)
        if rest is None:
            continue
        value = untrusted.json_object(rest)
        if value is not None:
            return value
    return None


def chief_pod(pods: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Worker 0's pod, preferring one that succeeded."""
    chiefs = [p for p in pods if reading.pod_index(p) == 0]
    chiefs.sort(key=lambda p: reading.phase(p) != "Succeeded")
    return chiefs[0] if chiefs else None


def owned_by(obj: Mapping[str, Any], uids: Iterable[str]) -> bool:
    wanted = set(uids)
    return any(ref.get("uid") in wanted for ref in reading.owner_references(obj))
