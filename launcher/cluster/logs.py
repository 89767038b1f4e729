"""Reading the workers' logs: once, merged in timestamp order, or followed as pods come and go.

Why it follows pods and not Jobs: a group restart replaces every worker's pod, and
`tflaunch logs -f` should keep going across it, saying which pod it follows now. So the
job's pods are watched (`watch.watch_job`) and each pod's log is streamed in a thread as
soon as its container has started, until the job is finished and every stream ended.

Why it never gives up on one pod: pods come and go under it (a group restart, a TTL, a
person). A pod deleted between listing and reading is skipped with a one-line note, and the
other workers' logs still come. A followed stream has a read timeout
(`FOLLOW_IDLE_TIMEOUT`): a connection that died without a reset (a node or proxy gone) would
otherwise hang forever. A stream cut that way (or broken) is opened anew while the pod
exists, from the last line's timestamp, and the lines already printed are not repeated.
An API server that is down (an upgrade, a restart) is waited out the same way, with the
command's one "unavailable since" notice (`launcher.cluster.retry`).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator

from launcher.cluster.cancel import Cancel
from launcher.cluster.client import KINDS, Cluster, stream_lines_or_cut
from launcher.cluster.find import JobObjects, job_objects
from launcher.cluster.retry import Backoff
from launcher.cluster.watch import join_all, watch_job
from launcher.cluster.wire import CONTAINER, READ_TIMEOUT, Obj, tail_text
from launcher.core import labels, reading
from launcher.core.errors import NotFound, TransientClusterError
from launcher.core.timestamps import parse_time


@dataclasses.dataclass(frozen=True)
class LogLine:
    """One line of a worker's log; `text` is None for the marker of a newly followed pod."""

    index: int | None
    pod: str
    text: str | None
    timestamp: str = ""
    note: str | None = None
    """Not a log line but a note about the pod (e.g. it was skipped), for stderr."""


FOLLOW_IDLE_TIMEOUT = 300.0
"""A followed log quiet this long is opened anew (no new line repeated): a dead connection
gives no error, only silence. A trainer quiet for longer costs one cheap reconnect."""
RECONNECT_DELAY = 1.0
"""Between a followed stream's cut and opening it anew."""
RESUME_MARGIN = 10
"""Seconds added to `sinceSeconds` when resuming, against clock skew; repeats are dropped."""


def _gone_note(index: int | None, pod: str) -> LogLine:
    return LogLine(index, pod, None, note=f"pod {pod} was deleted before its log was read; skipped")


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
    idle_timeout: float | None = None,
    opened: Callable[[], None] = lambda: None,
) -> Generator[str, None, bool]:
    """Lines of a pod's log; with `follow`, until the container ends, `cancel`, or no byte
    came for `idle_timeout` seconds (None: wait forever). Returns True when the stream was
    cut (broken, timed out or cancelled) rather than ended by the server. `opened` is
    called once the server has answered."""
    k = KINDS["Pod"]
    ns = cluster.ns(namespace)
    cancel = cancel or Cancel()
    query = [("container", container)] if container else []
    query += [("follow", "true")] * follow + [("timestamps", "true")] * timestamps
    if since_seconds is not None:
        query.append(("sinceSeconds", str(since_seconds)))
    read_timeout = idle_timeout if follow else READ_TIMEOUT
    with cluster.errors("get", k, ns, name, resource="pods/log"):
        response = cluster.request(
            "GET", k, ns, name, subresource="log", query=query, read_timeout=read_timeout
        )
    opened()
    with cancel.tracking(response), cluster.errors("get", k, ns, name, resource="pods/log"):
        return (yield from stream_lines_or_cut(response))  # ends quietly when cut


def job_logs(
    cluster: Cluster,
    name: str,
    namespace: str | None = None,
    *,
    worker: int | None = None,
    follow: bool = False,
    since_seconds: int | None = None,
    finished: Callable[[JobObjects], bool] = lambda _: False,
    jobs_recreated: bool = False,
) -> Iterator[LogLine]:
    """Log lines of the job's workers (all, or one `worker` index).

    Without `follow`: every pod's log (old attempts included), in timestamp order.
    With `follow`: each pod's log as its container starts (a restarted worker's new pod
    included), until `finished(objects)` says the job is done and every stream ended.
    `jobs_recreated`: the Jobs may vanish and come back (the operator restarts the group by
    recreating them), so only `finished` ends a followed stream.
    """
    ns = cluster.ns(namespace)
    if not follow:
        found = job_objects(cluster, name, ns)
        if not found.jobs and not found.pods:
            raise NotFound(f"job {name} not found in namespace {ns}")
        yield from pods_logs(cluster, found.pods, ns, worker=worker, since_seconds=since_seconds)
        return
    yield from _follow_logs(cluster, name, ns, worker, since_seconds, finished, jobs_recreated)


def pods_logs(
    cluster: Cluster,
    pods: Iterable[Obj],
    namespace: str,
    *,
    worker: int | None = None,
    since_seconds: int | None = None,
) -> Iterator[LogLine]:
    """The logs of pods listed a moment ago, merged in timestamp order; a pod deleted since
    is a note (first), not an error."""
    lines: list[LogLine] = []
    notes: list[LogLine] = []
    for pod in _sorted_pods(pods):
        index = reading.pod_index(pod)
        if (worker is not None and index != worker) or not _container_started(pod):
            continue
        pod_name = pod["metadata"]["name"]
        try:
            for raw in pod_log(
                cluster, pod_name, namespace, since_seconds=since_seconds, timestamps=True
            ):
                stamp, _, text = raw.partition(" ")
                lines.append(LogLine(index, pod_name, text, stamp))
        except NotFound:
            notes.append(_gone_note(index, pod_name))
    lines.sort(key=lambda line: line.timestamp)  # stable: a pod's own order is kept
    yield from notes
    yield from lines


class _Resume:
    """Where a followed log goes on after its stream ended: from the last line's timestamp,
    skipping the lines at or before it that were already printed."""

    def __init__(self, since: int | None) -> None:
        self.since = since
        self.last = ""
        self.at_last = 0
        """How many lines carried exactly the `last` timestamp."""
        self.skip_at_last = 0

    def since_seconds(self, now: datetime.datetime) -> int | None:
        last = parse_time(self.last)
        if last is None:
            return self.since
        return max(1, math.ceil((now - last).total_seconds())) + RESUME_MARGIN

    def reopen(self) -> None:
        self.skip_at_last = self.at_last

    def fresh(self, stamp: str) -> bool:
        """Whether a line with `stamp` is new (and remember it)."""
        if self.last and stamp < self.last:
            return False
        if stamp == self.last:
            if self.skip_at_last:
                self.skip_at_last -= 1
                return False
            self.at_last += 1
            return True
        self.last, self.at_last, self.skip_at_last = stamp, 1, 0
        return True


def _follow_logs(
    cluster: Cluster,
    name: str,
    namespace: str,
    worker: int | None,
    since: int | None,
    finished: Callable[[JobObjects], bool],
    jobs_recreated: bool = False,
) -> Iterator[LogLine]:
    lines: queue.Queue[LogLine | BaseException | str] = queue.Queue()
    cancel = Cancel()
    streaming: set[str] = set()
    running: set[str] = set()
    threads: list[threading.Thread] = []

    def follow_pod(pod: str, index: int | None) -> None:
        resume = _Resume(since)

        def put(raw: str) -> None:
            stamp, _, text = raw.partition(" ")
            if resume.fresh(stamp):
                lines.put(LogLine(index, pod, text, stamp))

        backoff = Backoff()

        def opened() -> None:
            cluster.outage.ended(backoff)
            backoff.reset()

        while not cancel.cancelled:
            try:
                stream = pod_log(
                    cluster,
                    pod,
                    namespace,
                    follow=True,
                    since_seconds=resume.since_seconds(
                        datetime.datetime.now(datetime.timezone.utc)
                    ),
                    timestamps=True,
                    cancel=cancel,
                    idle_timeout=FOLLOW_IDLE_TIMEOUT,
                    opened=opened,
                )
                cut = _drain(stream, put)
                if not cut or cancel.wait(RECONNECT_DELAY):
                    return
                if not _still_there(cluster, pod, namespace):
                    return
            except TransientClusterError as error:
                # The API server is down (an upgrade, a restart): wait it out like the
                # job's watch does; the next stream resumes after the last line printed.
                cluster.outage.began(error, backoff)
                if cancel.wait(backoff.next(error.retry_after)):
                    return
            resume.reopen()

    def pump(pod: str, index: int | None) -> None:
        try:
            follow_pod(pod, index)
        except NotFound:
            if not cancel.cancelled:
                lines.put(_gone_note(index, pod))
        except BaseException as error:
            if not cancel.cancelled:
                lines.put(error)
        finally:
            lines.put(pod)  # this pod's stream ended

    def start(pods: Iterable[Obj]) -> Iterator[LogLine]:
        for pod in _sorted_pods(pods):
            pod_name = pod["metadata"]["name"]
            index = reading.pod_index(pod)
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
            if not objects.jobs and not objects.pods and not seen_job and not jobs_recreated:
                raise NotFound(f"job {name} not found in namespace {namespace}")
            gone = seen_job and not objects.jobs and not jobs_recreated
            if not running and (finished(objects) or gone):
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


def _drain(stream: Generator[str, None, bool], each: Callable[[str], None]) -> bool:
    """Hand every line of `stream` to `each`; return the stream's own return value."""
    while True:
        try:
            each(next(stream))
        except StopIteration as end:
            return bool(end.value)


def _still_there(cluster: Cluster, pod: str, namespace: str) -> bool:
    """Whether a pod whose followed stream was cut can be read again: it still exists (if its
    trainer has ended since, the new stream gives the rest of the log and ends)."""
    current = cluster.get("Pod", pod, namespace)
    return current is not None and not current["metadata"].get("deletionTimestamp")


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
    state = (reading.trainer_container(pod) or {}).get("state") or {}
    return bool(state.get("running")) or reading.terminated(pod) is not None


SHORT_TAIL_LINES = 5
"""When the last lines of a log are too big to read whole: how many are read instead (the
result line is the chief's last)."""


def pod_log_tail(cluster: Cluster, name: str, namespace: str, lines: int) -> str | None:
    """The last `lines` lines of a pod's trainer log, in bounded memory whatever the pod
    printed (`wire.tail_text`: long lines left out, the newest 1 MiB kept, at most 32 MiB
    read; when that was not the end, the last `SHORT_TAIL_LINES` are read instead); None
    when the pod is gone."""
    try:
        text, cut = _bounded_tail(cluster, name, namespace, lines)
        if cut and lines > SHORT_TAIL_LINES:
            text, _ = _bounded_tail(cluster, name, namespace, SHORT_TAIL_LINES)
    except NotFound:
        return None
    return text


def _bounded_tail(cluster: Cluster, name: str, namespace: str, lines: int) -> tuple[str, bool]:
    k = KINDS["Pod"]
    query = [("container", CONTAINER), ("tailLines", str(lines))]
    with cluster.errors("get", k, namespace, name, resource="pods/log"):
        response = cluster.request("GET", k, namespace, name, subresource="log", query=query)
        try:
            return tail_text(response.stream(64 * 1024, decode_content=True))
        finally:
            response.close()  # not drained: what was left unread is dropped with it
            response.release_conn()
