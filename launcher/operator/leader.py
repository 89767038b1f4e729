"""Leader election with a coordination.k8s.io Lease, so that two replicas never both act.

Why a Lease and not kopf's peering: kopf 1.45's peering pauses an operator for peers of
higher priority and, for peers of the *same* priority (the replicas of one Deployment),
warns ("possibly conflicting operators") and pauses *all* of them, itself included, until
the others are gone or presumed dead: two replicas would stand still together instead of
one taking over. So the replica that holds the Lease runs kopf; the others wait and run
nothing (they serve the health endpoint, so that their liveness probe passes). client-go's
rules, in short:

* Taking or renewing the Lease is a write based on the resourceVersion just read: of two
  replicas racing for it, the API server lets one win and answers the other 409.
* Expiry is judged by this replica's own monotonic clock since it last saw the Lease record
  change, never by comparing another machine's renewTime with ours (no clock skew).
* The leader renews every `retry` seconds; when it could not renew for `renew_deadline`
  seconds (< the Lease duration), it stops acting before anyone else may take over, and the
  process exits non-zero so that its pod restarts as a standby.
* A leader that stops normally releases the Lease (empty holder), so a standby takes over
  at its next try instead of after the full duration.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import logging
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from launcher.cluster.client import Cluster, Obj
from launcher.cluster.lease import create_lease, get_lease, replace_lease
from launcher.core.errors import ClusterError, Conflict

logger = logging.getLogger("tflaunch.operator.leader")

LEASE_NAME = "tflaunch-operator"
LEASE_SECONDS = 15
RENEW_DEADLINE_SECONDS = 10.0
RETRY_SECONDS = 2.0


def new_identity() -> str:
    """This replica's name in the Lease: its host (the pod's name) and a random suffix."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def micro_time(moment: datetime.datetime) -> str:
    """A Lease's MicroTime (RFC 3339 with microseconds, UTC)."""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Elector:
    """Takes, keeps and releases one Lease for this replica.

    Args:
        cluster: the API (`launcher.cluster`).
        namespace: where the Lease lives (the operator's own namespace).
        identity: this replica's holder identity (unique per process).
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        identity: str,
        *,
        name: str = LEASE_NAME,
        duration: int = LEASE_SECONDS,
        renew_deadline: float = RENEW_DEADLINE_SECONDS,
        retry: float = RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.identity = identity
        self.name = name
        self.duration = duration
        self.renew_deadline = renew_deadline
        self.retry = retry
        self.clock = clock
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._leading = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._thread: threading.Thread | None = None

    # --- one attempt ------------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One attempt to take the Lease, or to renew it when held; True when it is ours now.

        Raises:
            ClusterError: the API failed (other than a lost race, which is False).
        """
        now = datetime.datetime.now(datetime.timezone.utc)
        current = get_lease(self.cluster, self.name, self.namespace)
        if current is None:
            try:
                self._remember(create_lease(self.cluster, self.name, self.namespace,
                                            self._spec(now, {})))  # fmt: skip
            except Conflict:
                return False  # another replica created it first
            return True
        spec = current.get("spec") or {}
        self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        duration = spec.get("leaseDurationSeconds") or self.duration
        if holder and holder != self.identity and self.clock() - self._observed_at < duration:
            return False  # held by another replica, renewed within its duration as we saw it
        try:
            self._remember(replace_lease(self.cluster, current, self._spec(now, spec)))
        except Conflict:
            return False  # someone wrote it since we read it: we lost the race
        return True

    def _spec(self, now: datetime.datetime, old: Obj) -> Obj:
        ours = old.get("holderIdentity") == self.identity
        transitions = int(old.get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration,
            "acquireTime": old.get("acquireTime") if ours else micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions if ours or not old else transitions + 1,
        }

    def _observe(self, spec: Obj) -> None:
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("acquireTime"))
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()

    def _remember(self, lease: Obj) -> None:
        self._observe(lease.get("spec") or {})

    # --- the election -----------------------------------------------------------------------

    def acquire(self) -> None:
        """Block until this replica holds the Lease (an unavailable API is retried)."""
        said = ""
        while not self._stop.is_set():
            try:
                if self.try_acquire_or_renew():
                    self._leading = True
                    logger.info("leading: holding Lease %s/%s as %s", self.namespace,
                                self.name, self.identity)  # fmt: skip
                    return
                holder = str((self._observed or ("",))[0] or "")
                if holder != said:
                    said = holder
                    logger.info("standby: Lease %s/%s is held by %s; waiting", self.namespace,
                                self.name, holder)  # fmt: skip
            except ClusterError as error:
                logger.warning("cannot read or take Lease %s/%s: %s", self.namespace,
                               self.name, error)  # fmt: skip
            self._stop.wait(self.retry)

    def keep(self, on_lost: Callable[[], None]) -> None:
        """Renew the Lease in a background thread; call `on_lost` once when it cannot be
        renewed for `renew_deadline` seconds or another replica holds it."""

        def renew() -> None:
            renewed = self.clock()
            while not self._stop.wait(self.retry):
                try:
                    if self.try_acquire_or_renew():
                        renewed = self.clock()
                        continue
                    reason = "another replica holds it"
                except ClusterError as error:
                    if self.clock() - renewed < self.renew_deadline:
                        continue
                    reason = f"not renewed for {self.renew_deadline:.0f}s: {error}"
                self._leading = False
                self.lost.set()
                logger.error("lost Lease %s/%s (%s): stopping", self.namespace, self.name,
                             reason)  # fmt: skip
                on_lost()
                return

        self._thread = threading.Thread(target=renew, name="lease-renewal", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and hand the Lease back (empty holder), so a standby takes over at
        once; best effort."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.retry + 5)
        if not self._leading:
            return
        self._leading = False
        with contextlib.suppress(ClusterError):
            current = get_lease(self.cluster, self.name, self.namespace)
            spec = (current or {}).get("spec") or {}
            if current is not None and spec.get("holderIdentity") == self.identity:
                now = micro_time(datetime.datetime.now(datetime.timezone.utc))
                released = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1,
                            "renewTime": now}  # fmt: skip
                replace_lease(self.cluster, current, released)
                logger.info("released Lease %s/%s", self.namespace, self.name)


@contextlib.contextmanager
def standby_health(url: str | None) -> Iterator[None]:
    """Answer kopf's health endpoint (200 on any path) while this replica waits, so that a
    standby's liveness probe passes; closed before kopf binds the same address."""
    if not url:
        yield
        return
    parsed = urllib.parse.urlsplit(url)

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"standby": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer((parsed.hostname or "", parsed.port or 80), Healthy)
    thread = threading.Thread(target=server.serve_forever, name="standby-health", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
