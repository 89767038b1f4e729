"""Watching: list, then watch from the list's resourceVersion, for as long as the caller wants.

Why watches and not polls: `tflaunch wait`, `logs -f` and `delete --wait` follow a job
through many minutes; a watch sees every change as it happens at the cost of one open
request per kind. Each watch survives the API server's limits on its own: a request that
times out is renewed from the last resourceVersion (bookmarks keep it fresh), an expired
one (410 Gone) is listed anew, and an API server that becomes unavailable is waited for
with backoff (`launcher.cluster.retry`). Several streams run in threads and arrive through
one queue (`watch_many`).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Literal, cast

from launcher.cluster.cancel import Cancel
from launcher.cluster.client import Cluster, kind_of
from launcher.cluster.find import JobObjects
from launcher.cluster.retry import Backoff
from launcher.cluster.wire import WATCH_SECONDS, Gone, Obj
from launcher.core import labels
from launcher.core.errors import TransientClusterError, WaitTimeout

_Change = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    """One change seen by a watch. `RELISTED` carries the complete current list in `items`
    (after the first list, and again whenever the watch expired and was listed anew)."""

    type: Literal["RELISTED", "ADDED", "MODIFIED", "DELETED"]
    object: Obj | None = None
    items: tuple[Obj, ...] = ()


def watch(
    cluster: Cluster,
    kind: str,
    namespace: str | None = None,
    label_selector: str | None = None,
    *,
    cancel: Cancel | None = None,
    all_namespaces: bool = False,
    server_timeout: int = WATCH_SECONDS,
) -> Iterator[WatchEvent]:
    """List, then watch from the list's resourceVersion, until cancelled.

    Yields a `RELISTED` event with every current object first, then each change. When
    the watch times out it resumes from the last resourceVersion seen (bookmarks keep it
    fresh); when that has expired (410 Gone) it lists again and yields `RELISTED`.

    Once the first list has succeeded, an unavailable API server (refused, timeouts, 429,
    5xx, also as a watch ERROR event) is retried with backoff until cancelled: the caller
    owns the deadline. Before that, it is raised: the server was never reached.
    """
    k = kind_of(kind)
    cancel = cancel or Cancel()
    backoff = Backoff()
    stream = object()  # this watch, for the shared outage notice
    version = ""
    gone = True
    contacted = False
    while not cancel.cancelled:
        try:
            if gone:
                items, version = cluster.list_versioned(
                    k, namespace, label_selector, all_namespaces
                )
                contacted, gone = True, False
                cluster.outage.ended(stream)
                yield WatchEvent("RELISTED", items=tuple(items))
            for event_type, obj in cluster.watch_once(
                k, namespace, label_selector, version, server_timeout, cancel, all_namespaces
            ):
                backoff.reset()
                cluster.outage.ended(stream)
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if event_type in ("ADDED", "MODIFIED", "DELETED"):
                    obj.setdefault("apiVersion", k.api_version)
                    obj.setdefault("kind", k.kind)
                    yield WatchEvent(cast(_Change, event_type), object=obj)
        except Gone:
            gone = True
        except TransientClusterError as error:
            if cancel.cancelled:
                return
            if not contacted:
                raise
            cluster.outage.began(error, stream)
            cancel.wait(backoff.next(error.retry_after))


def wait_gone(
    cluster: Cluster, name: str, namespace: str | None = None, *, timeout: float = 300
) -> None:
    """Watch until no object of job `name` is left. Raises WaitTimeout."""
    ns = cluster.ns(namespace)
    selector = labels.job_selector_string(name)
    deadline = time.monotonic() + timeout
    for kind in ("Job", "Pod", "Service", "NetworkPolicy"):
        left: set[str] = set()
        for item in _watch_until(cluster, kind, ns, selector, deadline):
            if item.type == "RELISTED":
                left = {o["metadata"]["name"] for o in item.items}
            elif item.type == "DELETED" and item.object is not None:
                left.discard(item.object["metadata"]["name"])
            elif item.type == "ADDED" and item.object is not None:
                left.add(item.object["metadata"]["name"])
            if not left:
                break
        else:
            raise WaitTimeout(
                f"{kind.lower()}s of job {name} still exist after {timeout:.0f}s: "
                f"{', '.join(sorted(left))}; check their finalizers "
                f"(kubectl get {kind.lower()} -n {ns} -l {selector} -o yaml)"
            )


def _watch_until(
    cluster: Cluster, kind: str, namespace: str, selector: str, deadline: float
) -> Iterator[WatchEvent]:
    """`watch` that ends (without error) when the monotonic `deadline` passes."""
    for item in watch_many(cluster, [(kind, namespace, selector)], tick=0.5):
        if time.monotonic() > deadline:
            return
        if item is not None:
            yield item[1]


def watch_many(
    cluster: Cluster,
    streams: Sequence[tuple[str, str | None, str | None]],
    *,
    tick: float = 1.0,
    all_namespaces: bool = False,
) -> Iterator[tuple[int, WatchEvent] | None]:
    """Several watches at once: yields `(stream number, event)`, or None every `tick`
    seconds without events (so callers can check their deadlines). Each stream is a
    `(kind, namespace, label selector)`; each runs in its own thread, all end with the
    generator."""
    cancel = Cancel()
    events: queue.Queue[tuple[int, WatchEvent | BaseException]] = queue.Queue()

    def pump(number: int, kind: str, namespace: str | None, selector: str | None) -> None:
        try:
            for event in watch(
                cluster, kind, namespace, selector, cancel=cancel, all_namespaces=all_namespaces
            ):
                events.put((number, event))
        except BaseException as error:  # handed to the consumer, which raises it
            if not cancel.cancelled:
                events.put((number, error))

    threads = [
        threading.Thread(target=pump, args=(n, *stream), daemon=True, name=f"watch-{stream[0]}")
        for n, stream in enumerate(streams)
    ]
    for thread in threads:
        thread.start()
    try:
        while True:
            try:
                number, item = events.get(timeout=tick)
            except queue.Empty:
                yield None
                continue
            if isinstance(item, BaseException):
                raise item
            yield number, item
    finally:
        # Join, not just cancel: a daemon thread still inside an HTTPS read when the
        # interpreter exits aborts the process (SIGABRT, exit 134: issue 8's `delete`).
        cancel.cancel()
        join_all(threads)


def join_all(threads: Sequence[threading.Thread], timeout: float = 5.0) -> None:
    """Wait for cancelled stream threads to end (their reads were shut down, so quickly)."""
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def watch_job(
    cluster: Cluster, name: str, namespace: str | None = None, *, tick: float = 1.0
) -> Iterator[JobObjects]:
    """The job's Jobs and Pods, anew after every change (and every `tick` seconds), from
    two watches. The first snapshot comes once both have listed."""
    ns = cluster.ns(namespace)
    selector = labels.job_selector_string(name)
    state: list[dict[str, Obj]] = [{}, {}]
    listed = [False, False]
    for item in watch_many(cluster, [("Job", ns, selector), ("Pod", ns, selector)], tick=tick):
        if item is not None:
            number, event = item
            _update(state[number], event)
            listed[number] = listed[number] or event.type == "RELISTED"
        if all(listed):
            yield JobObjects(name, ns, jobs=tuple(state[0].values()), pods=tuple(state[1].values()))


def _update(state: dict[str, Obj], event: WatchEvent) -> None:
    if event.type == "RELISTED":
        state.clear()
        state.update({o["metadata"]["name"]: o for o in event.items})
    elif event.object is not None:
        name = event.object["metadata"]["name"]
        if event.type == "DELETED":
            state.pop(name, None)
        else:
            state[name] = event.object
