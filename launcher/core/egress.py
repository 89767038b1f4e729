"""The egress rules of a job's NetworkPolicy (`spec.egress`, `spec.egressTo`,
`spec.denyMetadataEgress`): pure, read by `launcher.core.render`.

`egress: open` leaves egress unrestricted, or with denyMetadataEgress everywhere but the
cloud metadata address. `egress: peers` allows only what training needs: the job's own
workers on the ports they serve each other (`peer_ports`), DNS on port 53 (to any address:
the cluster's DNS may be pods, a node-local cache or a process on the node, which a pod
selector could not all name), and each `egressTo` destination. Everything else is denied,
the API server's ClusterIP and the node's own ports (the kubelet's) included.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from launcher.api.spec import METADATA_ADDRESS, JobSpec

DNS_PORTS = ({"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53})
_METADATA = ipaddress.ip_network(f"{METADATA_ADDRESS}/32")


def rules(
    spec: JobSpec, worker_selector: dict[str, str], peer_ports: list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """The policy's `egress` list; None: egress unrestricted (no Egress policy type)."""
    if spec.egress == "peers":
        deny = spec.deny_metadata_egress
        return [
            {"to": [{"podSelector": {"matchLabels": worker_selector}}], "ports": peer_ports},
            {"ports": [dict(port) for port in DNS_PORTS]},
            *(_target(t.cidr, t.port, t.protocol, deny) for t in spec.egress_to),
        ]
    if spec.deny_metadata_egress:
        everywhere = [
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": [f"{METADATA_ADDRESS}/32"]}},
            {"ipBlock": {"cidr": "::/0"}},
        ]
        return [{"to": everywhere}]
    return None


def _target(cidr: str, port: int | None, protocol: str, deny_metadata: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"cidr": cidr}
    network = ipaddress.ip_network(cidr)
    if (
        deny_metadata
        and network.version == 4
        and network != _METADATA
        and _METADATA.subnet_of(network)  # type: ignore[arg-type]
    ):
        block["except"] = [str(_METADATA)]
    ports = {"protocol": protocol, **({"port": port} if port is not None else {})}
    return {"to": [{"ipBlock": block}], "ports": [ports]}
