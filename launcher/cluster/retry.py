"""Riding out an API server that is briefly unavailable.

Why: `tflaunch wait`, `submit --wait`, `logs -f` and `delete` follow a job for minutes to
hours, and a control-plane upgrade, an etcd leader change or an overloaded server answers
with refused connections, 429 ("storage is (re)initializing") or 5xx for seconds to minutes.
None of that says anything about the job, so none of it may end the command: transient
failures are retried with capped, jittered exponential backoff that honours Retry-After, for
as long as the caller's own deadline allows (`--timeout`). A server that was never reached is
different (a wrong context, a cluster that is down): that fails at once, so a typo costs a
second, not a timeout. The user is told once that the server is unavailable, and since when.
"""

from __future__ import annotations

import datetime
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from launcher.core.errors import TransientClusterError

T = TypeVar("T")

FIRST_DELAY = 0.5
MAX_DELAY = 8.0
MAX_RETRY_AFTER = 30.0


class Backoff:
    """Delays between retries: doubling from FIRST_DELAY up to MAX_DELAY, each drawn from
    [delay/2, delay] so that many clients do not retry in step; a server's Retry-After is a
    floor (capped at MAX_RETRY_AFTER)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._attempt = 0

    def reset(self) -> None:
        self._attempt = 0

    def next(self, retry_after: float | None = None) -> float:
        delay = min(MAX_DELAY, FIRST_DELAY * 2**self._attempt)
        self._attempt += 1
        jittered = self._rng.uniform(delay / 2, delay)
        if retry_after:
            jittered = max(jittered, min(retry_after, MAX_RETRY_AFTER))
        return jittered


class Outage:
    """Says once when the API server became unavailable, and once when it is back.

    Shared by every stream of one command (they run in threads): the outage begins with the
    first caller that fails and ends when no caller is failing any more, so it is one pair of
    messages, not one per watch.
    """

    def __init__(self, server: str, notify: Callable[[str], None]) -> None:
        self.server = server
        self.notify = notify
        self._since: float | None = None
        self._failing: set[object] = set()
        self._lock = threading.Lock()

    def began(self, error: TransientClusterError, caller: object = None) -> None:
        with self._lock:
            self._failing.add(caller)
            if self._since is not None:
                return
            self._since = time.monotonic()
        clock = datetime.datetime.now().strftime("%H:%M:%S")
        self.notify(
            f"the API server at {self.server} is unavailable since {clock} "
            f"({error.short}); retrying until it is back"
        )

    def ended(self, caller: object = None) -> None:
        with self._lock:
            self._failing.discard(caller)
            if self._since is None or self._failing:
                return
            down, self._since = time.monotonic() - self._since, None
        self.notify(f"the API server is back after {down:.0f} s")


def retrying(
    call: Callable[[], T],
    outage: Outage,
    *,
    deadline: float | None = None,
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """`call()` until it returns, retrying transient API failures until the monotonic
    `deadline` (None: no limit). Any other error, and the last transient one once the
    deadline has passed, is raised."""
    backoff = Backoff()
    caller = object()
    while True:
        try:
            result = call()
        except TransientClusterError as error:
            delay = backoff.next(error.retry_after)
            if deadline is not None and time.monotonic() + delay > deadline:
                outage.ended(caller)
                raise
            outage.began(error, caller)
            sleep(delay)
            continue
        outage.ended(caller)
        return result
