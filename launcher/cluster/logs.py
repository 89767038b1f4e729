"""Reading the workers' logs: once, merged in timestamp order, or followed as pods come and go.

Why it follows pods and not Jobs: a group restart replaces every worker's pod, and
`tflaunch logs -f` should keep going across it, saying which pod it follows now. So the
job's pods are watched (`watch.watch_job`) and each pod's log is streamed in a thread as
soon as its container has started, until the job is finished and every stream ended.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from launcher.cluster.client import (
    CONNECT_TIMEOUT,
    CONTAINER,
    KINDS,
    READ_TIMEOUT,
    Cancel,
    Cluster,
    Obj,
    stream_lines,
)
from launcher.cluster.find import JobObjects, job_objects
from launcher.cluster.watch import join_all, watch_job
from launcher.core import labels
from launcher.core.errors import NotFound


@dataclasses.dataclass(frozen=True)
class LogLine:
    """One line of a worker's log; `text` is None for the marker of a newly followed pod."""

    index: int | None
    pod: str
    text: str | None
    timestamp: str = ""


def pod_log(
    cluster: Cluster,
    name: str,
    namespace: str | None = None,
    *,
    container: str | None = CONTAINER,
    follow: bool = False,
    since_seconds: int | None = None,
    timestamps: bool = False,
    cancel: Cancel | None = None,
) -> Iterator[str]:
    """Lines of a pod's log; with `follow`, until the container ends or `cancel`."""
    k = KINDS["Pod"]
    ns = cluster.ns(namespace)
    cancel = cancel or Cancel()
    kwargs: dict[str, Any] = {
        "container": container,
        "follow": follow,
        "timestamps": timestamps,
    }
    if since_seconds is not None:
        kwargs["since_seconds"] = since_seconds
    if not follow:  # a followed log may stay quiet for as long as an epoch takes
        kwargs["_request_timeout"] = (CONNECT_TIMEOUT, READ_TIMEOUT)
    with cluster.errors("get", k, ns, name, resource="pods/log"):
        response = cluster.api(k).read_namespaced_pod_log(
            name, ns, _preload_content=False, **kwargs
        )
    with cancel.tracking(response), cluster.errors("get", k, ns, name, resource="pods/log"):
        yield from stream_lines(response)  # ends quietly when the stream breaks


def job_logs(
    cluster: Cluster,
    name: str,
    namespace: str | None = None,
    *,
    worker: int | None = None,
    follow: bool = False,
    since_seconds: int | None = None,
    finished: Callable[[JobObjects], bool] = lambda _: False,
) -> Iterator[LogLine]:
    """Log lines of the job's workers (all, or one `worker` index).

    Without `follow`: every pod's log (old attempts included), in timestamp order.
    With `follow`: each pod's log as its container starts (a restarted worker's new pod
    included), until `finished(objects)` says the job is done and every stream ended.
    """
    ns = cluster.ns(namespace)
    if not follow:
        found = job_objects(cluster, name, ns)
        if not found.jobs and not found.pods:
            raise NotFound(f"job {name} not found in namespace {ns}")
        yield from _logs_once(cluster, found.pods, ns, worker, since_seconds)
        return
    yield from _follow_logs(cluster, name, ns, worker, since_seconds, finished)


def _logs_once(
    cluster: Cluster, pods: Iterable[Obj], namespace: str, worker: int | None, since: int | None
) -> Iterator[LogLine]:
    lines: list[LogLine] = []
    for pod in _sorted_pods(pods):
        index = _pod_index(pod)
        if (worker is not None and index != worker) or not _container_started(pod):
            continue
        pod_name = pod["metadata"]["name"]
        for raw in pod_log(cluster, pod_name, namespace, since_seconds=since, timestamps=True):
            stamp, _, text = raw.partition(" ")
            lines.append(LogLine(index, pod_name, text, stamp))
    lines.sort(key=lambda line: line.timestamp)  # stable: a pod's own order is kept
    yield from lines


def _follow_logs(
    cluster: Cluster,
    name: str,
    namespace: str,
    worker: int | None,
    since: int | None,
    finished: Callable[[JobObjects], bool],
) -> Iterator[LogLine]:
    lines: queue.Queue[LogLine | BaseException | str] = queue.Queue()
    cancel = Cancel()
    streaming: set[str] = set()
    running: set[str] = set()
    threads: list[threading.Thread] = []

    def pump(pod: str, index: int | None) -> None:
        try:
            for text in pod_log(
                cluster, pod, namespace, follow=True, since_seconds=since, cancel=cancel
            ):
                lines.put(LogLine(index, pod, text))
        except BaseException as error:
            if not cancel.cancelled:
                lines.put(error)
        finally:
            lines.put(pod)  # this pod's stream ended

    def start(pods: Iterable[Obj]) -> Iterator[LogLine]:
        for pod in _sorted_pods(pods):
            pod_name = pod["metadata"]["name"]
            index = _pod_index(pod)
            if pod_name in streaming or not _container_started(pod):
                continue
            if worker is not None and index != worker:
                continue
            streaming.add(pod_name)
            running.add(pod_name)
            yield LogLine(index, pod_name, None)
            thread = threading.Thread(target=pump, args=(pod_name, index), daemon=True)
            threads.append(thread)
            thread.start()

    try:
        seen_job = rechecked = False
        for objects in watch_job(cluster, name, namespace, tick=0.2):
            seen_job = seen_job or bool(objects.jobs)
            yield from start(objects.pods)
            while True:
                try:
                    item = lines.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, str):
                    running.discard(item)
                else:
                    yield item
            if not objects.jobs and not objects.pods and not seen_job:
                raise NotFound(f"job {name} not found in namespace {namespace}")
            if not running and (finished(objects) or (seen_job and not objects.jobs)):
                if rechecked:
                    return
                # The Pod watch may lag the Job's: list once more for pods not yet read.
                rechecked = True
                yield from start(
                    cluster.list_objects("Pod", namespace, labels.job_selector_string(name))
                )
                if not running:
                    return
    finally:
        cancel.cancel()
        join_all(threads)


def _pod_index(pod: Obj) -> int | None:
    meta = pod.get("metadata") or {}
    return labels.worker_index_of(meta.get("labels") or {}, meta.get("annotations") or {})


def _sorted_pods(pods: Iterable[Obj]) -> list[Obj]:
    return sorted(
        pods,
        key=lambda p: (
            p["metadata"].get("creationTimestamp") or "",
            p["metadata"]["name"],
        ),
    )


def _container_started(pod: Obj) -> bool:
    """Whether the trainer container has (or had) a log: running or terminated."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        if (
            state.get("running")
            or state.get("terminated")
            or status.get("lastState", {}).get("terminated")
        ):
            return True
    return False
