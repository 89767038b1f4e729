"""The cross-field rules of a MultiWorkerJob, each written once for both of its checkers.

A rule is a CEL expression, the field it is reported on and its message. The CRD carries
each one as an `x-kubernetes-validations` entry, so `kubectl apply` of a bad MultiWorkerJob
is refused by the API server; `launcher.core.load.validate` checks the same condition in
Python and raises a `SpecError` on the same field whose text starts with the same message
(then adds the numbers of the case at hand). A test applies a violation of every rule to a
real API server and compares both texts.

Pure data, imported by `launcher.api.spec` (the bounds of its fields) and by the checks in
`launcher.core`.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

INT32_MAX = 2**31 - 1
"""The largest value of a field the API server stores as int32."""
DNS_1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""Kubernetes' pattern for a DNS-1123 subdomain (names of service accounts, classes...)."""

MAX_NAME_LENGTH = 63
"""Every generated object name and pod hostname must fit a DNS-1123/1035 label."""

MIN_PORT = 1024
"""The trainer runs as UID 10001, which cannot bind privileged ports."""
MAX_WORKERS = 10_000
"""The most workers a job may have: also the bound on any worker count or index read back
from the cluster (a label anyone who can create a Job may write)."""
MAX_PER_WORKER = 500
"""The per-worker layout renders N Jobs, each with N addresses: its size grows with N²."""

WORKER_HOST_INFIX = "-worker-"
"""Worker i's host name is `<name>-worker-<i>` (`launcher.core.names.worker_hostname`)."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """One cross-field rule of the spec."""

    field: str
    """Where the error is reported, e.g. spec.trainer.globalBatchSize."""
    cel: str
    """The condition that must hold, in CEL; `self` is the object at `scope`."""
    message: str
    """What is wrong and the fix, the same text from the API server and from the CLI."""
    scope: Literal["root", "spec"] = "spec"
    """root: `self` is the whole resource (the only place CEL sees metadata.name)."""

    @property
    def field_path(self) -> str:
        """The CRD rule's fieldPath: `field` relative to `scope`."""
        return "." + self.field.removeprefix("spec." if self.scope == "spec" else "")


NAME_FORMAT = Rule(
    field="metadata.name",
    scope="root",
    cel="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
    message=(
        "must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter "
        "(e.g. mnist-1)"
    ),
)

NAME_LENGTH = Rule(
    field="metadata.name",
    scope="root",
    cel=(
        f"self.metadata.name.size() + {len(WORKER_HOST_INFIX)} + "
        f"string(self.spec.workers - 1).size() <= {MAX_NAME_LENGTH}"
    ),
    message=(
        f"is too long: the last worker's host name, <name>{WORKER_HOST_INFIX}<workers - 1>, "
        f"must fit in {MAX_NAME_LENGTH} characters; shorten the name"
    ),
)

BATCH_DIVISIBLE = Rule(
    field="spec.trainer.globalBatchSize",
    cel=(
        # Only the built-in trainer's batch: a program of the user's (command, script) has its own.
        "has(self.script) || (has(self.command) && size(self.command) > 0) || "
        "self.workers < 1 || self.gpusPerWorker < 0 || self.trainer.globalBatchSize % "
        "(self.workers * (self.gpusPerWorker > 0 ? self.gpusPerWorker : 1)) == 0"
    ),
    message=(
        "must be a multiple of the replicas, workers x max(1, gpusPerWorker): every replica "
        "takes an equal share of the batch"
    ),
)

PORT_RANGE = Rule(
    field="spec.port",
    cel=f"self.port >= {MIN_PORT} && self.port <= 65535",
    message=(
        f"must be between {MIN_PORT} and 65535: the worker runs as non-root and "
        "cannot bind a port below 1024 (the default is 2222)"
    ),
)

PER_WORKER_SIZE = Rule(
    field="spec.workers",
    cel=f"self.layout != 'per-worker' || self.workers <= {MAX_PER_WORKER}",
    message=(
        f"is too many for the per-worker layout (one Job per worker, each listing every "
        f"worker: it grows with N²); use at most {MAX_PER_WORKER}, or layout: indexed "
        "(one Job for any number of workers)"
    ),
)

KUEUE_INDEXED = Rule(
    field="spec.layout",
    cel="self.gang != 'kueue' || self.layout == 'indexed'",
    message=(
        "must be indexed with gang: kueue: Kueue admits each Job as one workload, so the "
        "per-worker layout would make one workload per worker, admitted one by one instead "
        "of together"
    ),
)

CHIEF_PER_WORKER = Rule(
    field="spec.layout",
    cel="!has(self.tfConfig) || !has(self.tfConfig.chief) || self.tfConfig.chief == '' "
    "|| self.layout == 'per-worker'",
    message=(
        "must be per-worker with spec.tfConfig.chief: the chief's TF_CONFIG differs from the "
        "workers' by more than the index, which one Indexed Job cannot vary"
    ),
)

KUEUE_QUEUE = Rule(
    field="spec.queueName",
    cel="self.gang != 'kueue' || has(self.queueName)",
    message="is required with gang: kueue: the name of the LocalQueue that admits the job",
)

QUEUE_NEEDS_GANG = Rule(
    field="spec.queueName",
    cel="!has(self.queueName) || self.gang == 'kueue' || self.gang == 'volcano'",
    message="only applies with gang: kueue (a LocalQueue) or gang: volcano (a Volcano queue)",
)

VOLCANO_SCHEDULER = Rule(
    field="spec.schedulerName",
    cel="self.gang != 'volcano' || !has(self.schedulerName) || self.schedulerName == 'volcano'",
    message=(
        "must be volcano (or unset) with gang: volcano: only Volcano's scheduler honours its "
        "PodGroup"
    ),
)

METADATA_EGRESS = Rule(
    field="spec.denyMetadataEgress",
    cel="!self.denyMetadataEgress || self.networkPolicy",
    message="needs spec.networkPolicy: true (it is a NetworkPolicy rule)",
)

EGRESS_POLICY = Rule(
    field="spec.egress",
    cel="self.egress != 'peers' || self.networkPolicy",
    message="needs spec.networkPolicy: true with egress: peers (it is a NetworkPolicy rule)",
)

EGRESS_TO = Rule(
    field="spec.egressTo",
    cel="!has(self.egressTo) || size(self.egressTo) == 0 || self.egress == 'peers'",
    message=(
        "only applies with spec.egress: peers (with egress: open the workers reach everything "
        "already); set egress: peers or remove egressTo"
    ),
)

RESTART_PORT = Rule(
    field="spec.port",
    cel="!has(self.restart) || self.restart != 'inPlace' || self.port <= 65534",
    message=(
        "must be at most 65534 with restart: inPlace: the port above it is the workers' "
        "control port (their restart barrier)"
    ),
)

RULES: tuple[Rule, ...] = (
    NAME_FORMAT,
    NAME_LENGTH,
    BATCH_DIVISIBLE,
    PORT_RANGE,
    PER_WORKER_SIZE,
    KUEUE_INDEXED,
    CHIEF_PER_WORKER,
    KUEUE_QUEUE,
    QUEUE_NEEDS_GANG,
    VOLCANO_SCHEDULER,
    METADATA_EGRESS,
    EGRESS_POLICY,
    EGRESS_TO,
    RESTART_PORT,
)
"""Every rule the CRD carries; `launcher.core.load.validate` checks each one too."""
