"""The preemptions a job rode out, read from its pods (pure: dicts in, a summary out).

A worker told to stop (SIGTERM: eviction, drain, preemption) saves and exits
`contract.EXIT_PREEMPTED` (79), with the saved step in its termination message
(`contract.PREEMPTED_SAVED`). The Job's podFailurePolicy ignores that exit: the Job controller
replaces the pod without counting a failure, and the new group resumes at the saved step. The
per-worker table shows each index's newest pod, so without this count `status` and `wait`
would forget the preemption as soon as the replacement exists. (A job the operator runs has
the same count in its MultiWorkerJob's status.preemptions.)

Events, not pods: one preemption makes every worker save at the same step and exit 79 within
the pod's terminationGracePeriodSeconds. So, oldest exit first, an exit joins the current
preemption when it finished within the grace period of that preemption's first exit *and*
names the same saved step (or either names none: a program that writes no termination
message); a different step, or a later exit, is the next preemption.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from launcher.core import contract, labels
from launcher.core.timestamps import created_at, parse_time

Obj = Mapping[str, Any]

DEFAULT_GRACE_SECONDS = 30
"""The pod's terminationGracePeriodSeconds when its spec does not say (Kubernetes' default)."""


@dataclasses.dataclass(frozen=True)
class PreemptedExit:
    """One worker pod that saved and exited 79."""

    pod: str
    index: int | None
    finished: datetime.datetime
    step: int | None
    """The step it saved at, from its termination message; None when it wrote none."""
    grace_seconds: float


@dataclasses.dataclass(frozen=True)
class Preemptions:
    """How often the group was preempted, and where it resumed."""

    count: int = 0
    """Preemption events (every worker saved at one step), not pods."""
    resumed_at_step: int | None = None
    """The step the latest preemption saved at (where the group resumed); None: not said."""
    last: datetime.datetime | None = None
    """When the latest preemption's first worker exited."""

    def words(self) -> str:
        """`preempted 2x, resumed at step 640 (not a failure: no retry used)`; "" if never."""
        if not self.count:
            return ""
        return f"{self.short()} (not a failure: no retry used)"

    def short(self) -> str:
        """`preempted 2x, resumed at step 640`, for `wait`'s one-line progress."""
        if not self.count:
            return ""
        where = (
            f"resumed at step {self.resumed_at_step}"
            if self.resumed_at_step is not None
            else "resumed from the last checkpoint"
        )
        return f"preempted {self.count}x, {where}"


def trainer_terminated(pod: Obj) -> Obj | None:
    """The trainer container's `state.terminated` (the first container's without one named
    trainer); None while it has not terminated."""
    containers = (pod.get("status") or {}).get("containerStatuses") or []
    container = next((c for c in containers if c.get("name") == "trainer"), None)
    if container is None and containers:
        container = containers[0]
    terminated = ((container or {}).get("state") or {}).get("terminated")
    return terminated if isinstance(terminated, Mapping) else None


def preempted_exits(pods: Iterable[Obj]) -> list[PreemptedExit]:
    """The pods whose trainer exited 79, oldest exit first (pods without finishedAt, which a
    kubelet always writes, are left out: they cannot be placed in time)."""

    exits = []
    for pod in pods:
        terminated = trainer_terminated(pod)
        if terminated is None or terminated.get("exitCode") != contract.EXIT_PREEMPTED:
            continue
        finished = parse_time(terminated.get("finishedAt"))
        if finished is None:
            continue
        meta = pod.get("metadata") or {}
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        exits.append(
            PreemptedExit(
                pod=str(meta.get("name") or ""),
                index=_index(pod),
                finished=finished,
                step=contract.saved_step(terminated.get("message")),
                grace_seconds=float(DEFAULT_GRACE_SECONDS if grace is None else grace),
            )
        )
    return sorted(exits, key=lambda e: (e.finished, e.pod))


def events(exits: Iterable[PreemptedExit]) -> list[list[PreemptedExit]]:
    """`exits` (oldest first) grouped into preemptions: see the module docstring."""
    grouped: list[list[PreemptedExit]] = []
    for exit_ in exits:
        if grouped and _same_preemption(grouped[-1], exit_):
            grouped[-1].append(exit_)
        else:
            grouped.append([exit_])
    return grouped


def _same_preemption(event: list[PreemptedExit], exit_: PreemptedExit) -> bool:
    first = event[0]
    grace = datetime.timedelta(seconds=max(e.grace_seconds for e in [*event, exit_]))
    if exit_.finished - first.finished > grace:
        return False
    steps = {e.step for e in event if e.step is not None}
    return exit_.step is None or not steps or exit_.step in steps


def summarize(pods: Iterable[Obj]) -> Preemptions:
    """The job's preemptions from all of its pods (replaced ones included)."""
    grouped = events(preempted_exits(pods))
    if not grouped:
        return Preemptions()
    latest = grouped[-1]
    steps = [e.step for e in latest if e.step is not None]
    return Preemptions(
        count=len(grouped),
        resumed_at_step=steps[0] if steps else None,
        last=latest[0].finished,
    )


def replaced_by_index(pods: Iterable[Obj]) -> dict[int, int]:
    """Per worker index, its pods that exited 79 and have a newer pod: the replacements
    that were preemptions, not failures (what `wait` leaves out of "worker N restarted")."""

    by_index: dict[int, list[Obj]] = {}
    for pod in pods:
        index = _index(pod)
        if index is not None:
            by_index.setdefault(index, []).append(pod)
    replaced: dict[int, int] = {}
    for index, group in by_index.items():
        ordered = sorted(group, key=lambda p: (created_at(p) or _EPOCH, p["metadata"]["name"]))
        count = sum(
            (trainer_terminated(p) or {}).get("exitCode") == contract.EXIT_PREEMPTED
            for p in ordered[:-1]
        )
        if count:
            replaced[index] = count
    return replaced


def _index(pod: Obj) -> int | None:
    meta = pod.get("metadata") or {}
    return labels.worker_index_of(meta.get("labels") or {}, meta.get("annotations") or {})


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
