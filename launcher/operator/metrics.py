"""Prometheus metrics of the operator, served on `/metrics` (`tflaunch operator --metrics-address`).

Why these four: a platform engineer wants to see how many jobs are in which phase (a pile of
Restarting or Failed jobs is the alert), how often worker groups restart (flaky nodes, OOMs),
whether reconciling keeps up (its duration), and whether the API server is refusing the
operator (errors by HTTP status: 403 means RBAC, 409 name conflicts, 429/5xx an overloaded
server, 0 an unreachable one).

prometheus_client belongs to the `operator` extra; this module is imported only when metrics
are asked for, so the operator itself runs without it. Everything is registered in a
registry of its own (not the process-global one), so tests can create as many as they like.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, get_args

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from launcher.operator import crd

PHASES: tuple[str, ...] = get_args(crd.Phase)
"""Every phase a MultiWorkerJob can be in; each gets a series, also when none is in it."""
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""One reconcile is a get, two lists and a few writes: milliseconds, seconds when the API
server is slow."""


class OperatorMetrics:
    """The operator's metrics: fed by the controller (`reconciled`) and by every failed API
    call made through `launcher.cluster` (`api_error`).

    Args:
        registry: where the metrics are registered; default a new one of their own.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._lock = threading.Lock()
        self._phases: dict[tuple[str, str], str] = {}
        self.jobs = Gauge(
            "tflaunch_multiworkerjobs",
            "MultiWorkerJobs the operator serves, by phase.",
            ["phase"],
            registry=self.registry,
        )
        self.restarts = Counter(
            "tflaunch_group_restarts",
            "Whole worker-group restarts (a worker failed), by namespace: the operator's, and "
            "with spec.restart inPlace the workers' own (tflaunch_group_restarts_in_place).",
            ["namespace"],
            registry=self.registry,
        )
        self.restarts_in_place = Counter(
            "tflaunch_group_restarts_in_place",
            "Of those, the restarts inside the same pods (spec.restart inPlace) the operator "
            "counted from the workers' log, by namespace.",
            ["namespace"],
            registry=self.registry,
        )
        self.reconcile_seconds = Histogram(
            "tflaunch_reconcile_duration_seconds",
            "Time one reconcile of a MultiWorkerJob took (read, decide, write).",
            buckets=RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.api_errors = Counter(
            "tflaunch_api_errors",
            "Kubernetes API calls that failed, by HTTP status code (0: server unreachable).",
            ["code"],
            registry=self.registry,
        )
        prometheus_client.ProcessCollector(registry=self.registry)
        for phase in PHASES:
            self.jobs.labels(phase=phase).set(0)

    @contextmanager
    def timing(self) -> Iterator[None]:
        """Observe the duration of the block (one reconcile), failed ones included."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.reconcile_seconds.observe(time.perf_counter() - started)

    def reconciled(
        self,
        namespace: str,
        name: str,
        resource: Mapping[str, Any] | None,
        new_status: crd.Status | None,
        restarted_in_place: int = 0,
    ) -> None:
        """Record what one reconcile saw (`resource`: None when it is gone) and wrote, and
        how many restarts in place it counted."""
        old = (resource or {}).get("status") or {}
        if restarted_in_place:
            self.restarts_in_place.labels(namespace=namespace).inc(restarted_in_place)
        if new_status is not None and new_status.restarts > int(old.get("restarts") or 0):
            self.restarts.labels(namespace=namespace).inc(
                new_status.restarts - int(old.get("restarts") or 0)
            )
        phase = new_status.phase if new_status is not None else old.get("phase")
        with self._lock:
            if resource is None:
                self._phases.pop((namespace, name), None)
            elif phase:
                self._phases[(namespace, name)] = str(phase)
            counts = dict.fromkeys(PHASES, 0)
            for current in self._phases.values():
                counts[current] = counts.get(current, 0) + 1
            for each, count in counts.items():
                self.jobs.labels(phase=each).set(count)

    def api_error(self, code: int) -> None:
        """One failed API call, by its HTTP status (0: no answer)."""
        self.api_errors.labels(code=str(code)).inc()

    def serve(self, address: str) -> None:
        """Serve `/metrics` on `host:port` from a daemon thread (prometheus_client's server).

        Raises:
            OSError: the address cannot be bound.
        """
        host, port = parse_address(address)
        prometheus_client.start_http_server(port, addr=host, registry=self.registry)


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` (or `:port`, all interfaces) -> (host, port); ValueError when it is not."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not host:port, e.g. 0.0.0.0:8081")
    return host.strip("[]") or "0.0.0.0", int(port)
