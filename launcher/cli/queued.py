"""Kueue's Workloads of a job it holds back, for `tflaunch wait` and `status -w`: read again at
most every `READ_SECONDS` while one of the job's queued Jobs is suspended, never otherwise
(`launcher.core.admission` says what they mean).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from launcher.core import admission

if TYPE_CHECKING:
    from launcher.cluster.client import Cluster

Obj = Mapping[str, Any]

READ_SECONDS = 2.0
"""How often a held-back job's Workloads are read again (one LIST per queued Job)."""


class Workloads:
    """The latest Workloads of a followed job's held-back Jobs."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.found: Sequence[Obj] | None = None
        self.read_at = -READ_SECONDS

    def read(self, jobs: Sequence[Obj]) -> Sequence[Obj] | None:
        """The Workloads, read again when the last read is older than `READ_SECONDS`;
        None while Kueue holds none of `jobs` back, or when they cannot be read."""
        if not admission.held(jobs):
            self.found, self.read_at = None, -READ_SECONDS
            return None
        clock = time.monotonic()
        if clock - self.read_at >= READ_SECONDS:
            from launcher.cluster import find
            from launcher.cluster.retry import retrying

            self.found = retrying(lambda: find.workloads(self.cluster, jobs), self.cluster.outage)
            self.read_at = clock
        return self.found
