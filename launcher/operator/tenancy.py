"""What a MultiWorkerJob may ask of the cluster beyond running pods: the operator's allowlist.

Why the operator checks it: the operator creates the workers' Jobs with its own rights, so
without a check anyone allowed to write a MultiWorkerJob could have pods scheduled with a
priority class that preempts other tenants (`system-node-critical`), tolerate every taint,
or pin them to chosen nodes. Who may create Jobs and use a ServiceAccount at all is the API
server's to decide (the chart's ValidatingAdmissionPolicy, docs/security.md); what the
pods may ask the scheduler for is this list's, set by the cluster admin (chart values
`tenancy.*`, `tflaunch operator --allowed-...`).

`None` for a list means "anything" (a bare `tflaunch operator`, e.g. in development); the
chart always passes lists. Pure: `check` raises `SpecError` naming the field and the fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from launcher.api.spec import MultiWorkerJob
from launcher.core.errors import SpecError

ANY = "*"
"""In a list: every value is allowed."""


@dataclasses.dataclass(frozen=True)
class Allowlist:
    """The values a MultiWorkerJob may use; None: any."""

    priority_classes: frozenset[str] | None = None
    """spec.priorityClassName values ("" — none — is always allowed)."""
    toleration_keys: frozenset[str] | None = None
    """Taint keys spec.tolerations may name (an empty key tolerates every taint: only `*`)."""
    node_label_keys: frozenset[str] | None = None
    """Node label keys spec.nodeSelector and spec.affinity.nodeAffinity may select on."""

    @classmethod
    def parse(
        cls,
        priority_classes: str | None,
        toleration_keys: str | None,
        node_label_keys: str | None,
    ) -> Allowlist:
        """From comma-separated lists (None: any; "": none)."""
        return cls(_names(priority_classes), _names(toleration_keys), _names(node_label_keys))

    def check(self, job: MultiWorkerJob) -> None:
        """Raise `SpecError` for the first field that asks for what the list does not allow."""
        spec = job.spec
        priority = spec.priority_class_name
        if priority and not _allows(self.priority_classes, priority):
            raise _refused("spec.priorityClassName", priority, "priorityClassNames")
        for i, toleration in enumerate(spec.tolerations):
            key = toleration.key or "(empty: every taint)"
            if not _allows(self.toleration_keys, toleration.key or None):
                raise _refused(f"spec.tolerations[{i}].key", key, "tolerationKeys")
        for key in spec.node_selector:
            if not _allows(self.node_label_keys, key):
                raise _refused(f"spec.nodeSelector.{key}", key, "nodeLabelKeys")
        for where, key in _node_affinity_keys(spec.affinity):
            if not _allows(self.node_label_keys, key):
                raise _refused(f"spec.affinity.nodeAffinity...{where}", key, "nodeLabelKeys")


def _names(text: str | None) -> frozenset[str] | None:
    if text is None:
        return None
    return frozenset(n for n in text.replace(",", " ").split() if n)


def _allows(allowed: frozenset[str] | None, value: str | None) -> bool:
    if allowed is None or ANY in allowed:
        return True
    return value is not None and value in allowed


def _refused(field: str, value: str, setting: str) -> SpecError:
    return SpecError(
        field,
        f"{value!r} is not allowed by this cluster's tflaunch operator (its chart value "
        f"tenancy.{setting}); leave it out, or ask the cluster admin to allow it",
    )


def _node_affinity_keys(affinity: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    """(where, label key) of every node selector requirement in a pod affinity."""
    node = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    if not isinstance(node, Mapping):
        return
    terms: list[Any] = []
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if isinstance(required, Mapping):
        terms += list(required.get("nodeSelectorTerms") or [])
    for preferred in node.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        if isinstance(preferred, Mapping):
            terms.append(preferred.get("preference") or {})
    for term in terms:
        if not isinstance(term, Mapping):
            continue
        for kind in ("matchExpressions", "matchFields"):
            for requirement in term.get(kind) or []:
                if isinstance(requirement, Mapping):
                    yield kind, str(requirement.get("key") or "")
