"""The group's failures as `tflaunch wait` sees them on a plain Job, for `launcher.core.oom`.

A failed pod stays while its Job runs (restartPolicy Never), so the group's history is in
the pods, and each is kept here once seen: when the Job fails, its controller deletes the
pods it still counts as active, those whose container ended but whose phase the kubelet has
not set yet. The step each failure reached is not in the pods: it is the chief's progress
when `wait` first saw the failed pod (None for pods that failed before the wait).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from launcher.core import oom, reading
from launcher.core.timestamps import EPOCH
from launcher.core.worker_end import WorkerEnd


class Failures:
    """Each failed worker pod seen so far, with the chief's step when it was first seen."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[WorkerEnd, int | None]] = {}
        self.started = False

    def update(self, pods: Iterable[Mapping[str, Any]], step: Callable[[], int | None]) -> bool:
        """Take in the pods; `step` (asked at most once, only when a pod failed since the
        last call) gives the chief's step now. True when a pod failed since."""
        new = False
        for pod in pods:
            end = WorkerEnd.from_pod(pod)
            if end is None or not end.failed or reading.name(pod) in self.seen:
                continue
            if not new:
                now = step() if self.started else None  # before the wait: not known
                new = True
            self.seen[reading.name(pod)] = (end, now)
        self.started = True
        return new

    def attempts(self) -> list[oom.Failure]:
        return oom.attempts(self.seen.values())

    def latest(self, index: int) -> tuple[WorkerEnd, int | None] | None:
        """Worker `index`'s last failed pod's end and step."""
        mine = [pair for pair in self.seen.values() if pair[0].index == index]
        return max(mine, key=lambda pair: pair[0].finished_at or EPOCH, default=None)
