"""A coordination.k8s.io Lease, read and written with optimistic concurrency: the API edge of
the operator's leader election (`launcher.operator.leader`).

Every write names the resourceVersion it was based on, so of two replicas that read the same
Lease and both try to take it, the API server lets exactly one succeed and answers the other
409 (`Conflict`); that is what makes the election safe, not any clock.
"""

from __future__ import annotations

from launcher.cluster.client import Cluster, kind_of
from launcher.cluster.wire import Obj

LEASE = kind_of("Lease")


def get_lease(cluster: Cluster, name: str, namespace: str) -> Obj | None:
    """The Lease, or None when there is none yet."""
    return cluster.get(LEASE, name, namespace)


def create_lease(cluster: Cluster, name: str, namespace: str, spec: Obj) -> Obj:
    """Create the Lease; `Conflict` when another replica created it first."""
    body = {
        "apiVersion": LEASE.api_version,
        "kind": LEASE.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    return cluster.create(body)


def replace_lease(cluster: Cluster, current: Obj, spec: Obj) -> Obj:
    """Write `spec` over the Lease as read in `current` (its resourceVersion): `Conflict` when
    it changed since."""
    meta = current["metadata"]
    body = {
        "apiVersion": LEASE.api_version,
        "kind": LEASE.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "resourceVersion": meta["resourceVersion"],
        },
        "spec": spec,
    }
    return cluster.replace(body)
