"""status.restarts with the restarts in place (spec.restart inPlace) counted in.

A restart in place replaces no pod, so the operator learns of it only from the wrappers'
`TFLAUNCH_RESTART` lines in the chief's log (`launcher.core.in_place`), read with the
progress (`launcher.operator.progress`) and once more when a worker pod fails. Counting
them in status.restarts before deciding makes spec.backoffLimit one budget of group
restarts, whichever way the group restarted: the wrappers of a group the operator recreates
start at that count ($TFLAUNCH_RESTARTS), and the operator fails the job once it is spent.
Pure.
"""

from __future__ import annotations

import dataclasses

from launcher.core import in_place
from launcher.core import progress as progress_lib
from launcher.operator.crd import Status
from launcher.operator.plan import Event

RESTARTED_IN_PLACE = "RestartedInPlace"
"""The Event reason of a group restart in place (the metric counts these)."""


def counted(old: Status, log: str | None) -> tuple[Status, tuple[Event, ...]]:
    """`old` with the restarts in place the chief's log tail shows beyond old.restarts, and
    one Event per restart newly seen; `old` itself when there is none."""
    lines = (log or "").splitlines()
    found = in_place.restarts(lines)
    progress = progress_lib.latest(lines)
    total = in_place.count(found, progress.generation if progress else None)
    if total <= old.restarts:
        return old, ()
    new = [r for r in found if r.generation > old.restarts]
    events = tuple(
        Event("Warning", RESTARTED_IN_PLACE, f"{words(r)}; every worker restarts its program "
              "in its pod, resuming from the last checkpoint")
        for r in new
    )  # fmt: skip
    last = words(new[-1]) if new else f"restart in place {total}"
    return dataclasses.replace(old, restarts=total, last_restart_in_place=last), events


def words(restart: in_place.Restart) -> str:
    return restart.words()
