"""Stopping a stream that another thread is reading.

Why a module of its own: `watch_many` and `logs -f` read HTTP streams in threads, and the
command that owns them must be able to end them at once (a deadline, Ctrl-C, the job is
done). Setting a flag is not enough while a read blocks, so `Cancel` also shuts the open
responses, which unblocks the read; the threads are then joined (see `watch.join_all`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class Cancel:
    """Stops watches and log streams from another thread: sets a flag and shuts their open
    HTTP responses, which unblocks a read in progress."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._responses: set[Any] = set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        self._event.set()
        with self._lock:
            responses, self._responses = list(self._responses), set()
        for response in responses:
            with contextlib.suppress(Exception):
                response.shutdown()

    def wait(self, seconds: float) -> bool:
        return self._event.wait(seconds)

    @contextlib.contextmanager
    def tracking(self, response: Any) -> Iterator[None]:
        with self._lock:
            self._responses.add(response)
        if self._event.is_set():
            response.shutdown()
        try:
            yield
        finally:
            with self._lock:
                self._responses.discard(response)
            response.close()
            response.release_conn()
