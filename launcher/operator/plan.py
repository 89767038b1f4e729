"""What a decision returns: the `Plan` of writes and the `Event`s to post.

Shared by the steps of a decision (`launcher.operator.reconcile`, `launcher.operator.outcome`)
and carried out by `launcher.operator.controller`.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from launcher.operator.crd import Status
from launcher.operator.objects import K8sObject

CONFLICT_RETRY_SECONDS = 30.0
RESTART_POLL_SECONDS = 5.0
"""How soon to look again while old Jobs are still terminating (their deletion events
usually come first)."""
STALL_POLL_SECONDS = 10.0
"""How soon to look again while something that no watch reports holds the group up: pods
the Job controller cannot create, or orphaned pods of an earlier group."""


@dataclasses.dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the MultiWorkerJob."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to do, in this order: status, deletions, patches, creations, the resource."""

    status: Status | None = None
    """The new status; None when it did not change (so nothing is written)."""
    delete_jobs: tuple[str, ...] = ()
    """Job names to delete with foreground propagation (their pods go first)."""
    patch_jobs: tuple[tuple[str, K8sObject], ...] = ()
    """(Job name, merge patch)."""
    create: tuple[K8sObject, ...] = ()
    """Objects to create; an existing one (409) is fine."""
    delete_resource: bool = False
    """ttlSecondsAfterFinished has passed: delete the MultiWorkerJob (its children cascade)."""
    events: tuple[Event, ...] = ()
    requeue_after: float | None = None
    """Look again after this many seconds even if nothing happens (TTL, slow deletions)."""


def transition_events(old: Status, new: Status) -> tuple[Event, ...]:
    """The Event that announces a change of phase (none for the same phase or Created)."""
    if new.phase == old.phase or new.phase is None or new.phase == "Created":
        return ()  # the creation itself is announced by its own event
    warning = new.phase in ("Failed", "Restarting")
    return (Event("Warning" if warning else "Normal", new.phase, new.message or new.reason),)
