"""An OOM kill that a restart repeats: the same worker OOM-killed again at about the same point.

Its memory limit and its batch are what they were, so after a restart from the checkpoint it
is killed at the same point again: each restart costs the time back to the checkpoint, and
then the same, until the budget is spent. One rule for the operator (its status.lastFailure
holds the previous failure) and for `tflaunch wait` on a plain Job (which reads the group's
failures from the pods of every attempt, with the chief's step when it saw each). Pure.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Sequence

from launcher.core import worker_end
from launcher.core.worker_end import WorkerEnd

OOM_KILLED = "OOMKilled"
"""The kubelet's reason for a container the kernel's OOM killer ended."""


@dataclasses.dataclass(frozen=True)
class Failure:
    """One failed attempt of the group: its culprit (`worker_end.culprit`), and the chief's
    step over all epochs when it failed, when known."""

    culprit: WorkerEnd
    step: int | None = None

    @property
    def oom_killed(self) -> bool:
        return self.culprit.reason == OOM_KILLED

    def describe(self) -> str:
        """`worker 1 was OOMKilled (exit 137) at its memory limit 200Mi, at step 40: raise
        ...`."""
        return self.culprit.describe(self.step)


def global_step(epoch: int, steps: int, step: int) -> int:
    """The chief's step counted over all epochs (`epoch` from 1, `steps` per epoch)."""
    return (epoch - 1) * steps + step


@dataclasses.dataclass(frozen=True)
class Again:
    """A worker OOM-killed again at about the same point: its latest kill, and why the group
    is not restarted after it."""

    kill: Failure
    why: str


def killed_again(failures: Sequence[Failure], tolerance: int) -> Again | None:
    """Why not to restart after `failures` (the group's, oldest first): a worker's last OOM
    kill and the one before it, with no failure from the earlier on known to be more than
    `tolerance` steps (an epoch's) past it. None: restart as usual.

    Other failures between the two do not say the group got further: a Job controller that
    replaces each worker's pod after its own back-off leaves a peer alone, whose rendezvous
    times out at the same step before the OOM-killed worker's pod is back."""
    for latest_at in reversed(range(len(failures))):
        latest = failures[latest_at]
        if not latest.oom_killed:
            continue
        same = [
            i for i in range(latest_at)
            if failures[i].oom_killed and failures[i].culprit.index == latest.culprit.index
        ]  # fmt: skip
        if not same:
            continue
        before = failures[same[-1]]
        if before.step is not None and any(
            f.step is not None and f.step > before.step + tolerance
            for f in failures[same[-1] + 1 :]
        ):
            return None  # the group got well past that point: not the same kill
        where = f" at step {latest.step}" if latest.step is not None else ""
        was = f" at step {before.step}" if before.step is not None else ""
        why = (
            f"OOM-killed again{where}, as before{was}: not retried, it would be killed at the "
            "same point again"
        )
        return Again(latest, why)
    return None


def attempts(ends: Iterable[tuple[WorkerEnd, int | None]]) -> list[Failure]:
    """The group's failed attempts, oldest first, from the ends of every pod of a plain Job
    (each with the chief's step when it was seen, if known).

    The workers of one attempt all ran together (MultiWorkerMirroredStrategy trains only
    then), and every pod of the next attempt started after that attempt's first failure:
    an end that started after the current attempt's first failure opens the next one."""
    ordered = sorted(
        ((end, step) for end, step in ends if end.failed),
        key=lambda pair: pair[0].finished_at or worker_end.NEVER,
    )
    groups: list[list[tuple[WorkerEnd, int | None]]] = []
    first_failure: datetime.datetime | None = None
    for end, step in ordered:
        started = end.started_at
        if not groups or (
            started is not None and first_failure is not None and started >= first_failure
        ):
            groups.append([])
            first_failure = end.finished_at
        groups[-1].append((end, step))
    found = []
    for group in groups:
        cause = worker_end.culprit(end for end, _ in group)
        if cause is not None:
            step = next(s for e, s in group if e is cause)
            found.append(Failure(cause, step))
    return found
