"""Workers that will never start, read from the kubelet's reason for a waiting container.

A pod whose image is absent, whose image name is invalid, or whose container refers to a
Secret or ConfigMap that does not exist stays Pending for ever: the kubelet retries, and the
Job counts nothing as a failure. MultiWorkerMirroredStrategy waits for every worker, so the
whole group waits with it. This module says which waiting reasons are such dead ends, which
object is to blame, and the fix, in one place for `wait`, `status` and the operator.

A pull error is a dead end when the registry answered that the image is not there (or refused
access). A registry that does not answer at all ("connection refused", a timeout) may come
back, so it is given longer (UNREACHABLE_GRACE_SECONDS) before `wait` ends with the same
message; either way the wait is bounded and says why, instead of an endless Pending.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

GRACE_SECONDS = 30.0
"""How long a dead-end reason must last before `wait` gives up on the job. Long enough for a
Secret applied just after the job, or a tag pushed a moment late, to be found on the
kubelet's next try (its image back-off starts at 10 s); short enough that a typo in an image
ends the wait in well under a minute instead of at its timeout."""

UNREACHABLE_GRACE_SECONDS = 120.0
"""How long an unreachable registry may last before `wait` gives up: a registry restarted or
a network blip passes within it (the kubelet tries again after 10, 20, 40 and 80 s, so
about five pulls fit); a registry that is down, or an address the nodes cannot reach, ends
the wait in two minutes with the registry named."""

_NOT_THERE = re.compile(
    r"not found|manifest unknown|repository does not exist|pull access denied|"
    r"unauthorized|authorization failed|denied: |no such host",
    re.IGNORECASE,
)
_UNREACHABLE = re.compile(
    r"connection refused|i/o timeout|no route to host|network is unreachable|"
    r"connection reset by peer|TLS handshake timeout|context deadline exceeded|"
    r"server misbehaving|dial tcp",
    re.IGNORECASE,
)
"""The registry did not answer (containerd's and Go's words): it may be restarting."""
_IMAGE = re.compile(r'image "([^"]+)"', re.IGNORECASE)
_REFERENCE = re.compile(r'(secret|configmap) "([^"]+)" not found', re.IGNORECASE)
_CLAIM = re.compile(r'persistentvolumeclaim "([^"]+)" not found', re.IGNORECASE)
"""The scheduler's word for a pod whose volume claim does not exist: no node will ever do."""


@dataclasses.dataclass(frozen=True)
class DeadEnd:
    """Why a worker's container will never start, and what to do."""

    reason: str
    """The kubelet's reason, e.g. ErrImageNeverPull."""
    culprit: str
    """The object at fault, e.g. `image "nosuch:1"` or `Secret "token"`."""
    fix: str
    unreachable: bool = False
    """The registry did not answer: it may come back (UNREACHABLE_GRACE_SECONDS, not
    GRACE_SECONDS), and the worker cannot start yet rather than never."""


def grace_seconds(end: DeadEnd) -> float:
    """How long `wait` lets this dead end last before it ends (read at each call, so that a
    test can shorten it)."""
    return UNREACHABLE_GRACE_SECONDS if end.unreachable else GRACE_SECONDS


def registry_of(image: str) -> str:
    """The registry host of an image reference (docker.io when it names none), as the
    container runtimes read it: a first component with a dot, a colon, or localhost."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def dead_end(reason: str | None, message: str | None, image: str | None = None) -> DeadEnd | None:
    """The dead end behind a waiting container's (reason, message), else None."""
    text = message or ""
    named = _IMAGE.search(text)
    image = image or (named.group(1) if named else None)
    shown = f'image "{image}"' if image else "the image"
    if reason == "ErrImageNeverPull":
        return DeadEnd(
            reason,
            shown,
            "it is not on the node and spec.imagePullPolicy is Never: load the image into "
            "every node (kind load, ctr images import) or push it to a registry and set "
            "spec.imagePullPolicy: IfNotPresent",
        )
    if reason == "InvalidImageName":
        return DeadEnd(reason, shown, "it is not a valid image reference: correct spec.image")
    if reason in ("ErrImagePull", "ImagePullBackOff") and _NOT_THERE.search(text):
        return DeadEnd(
            reason,
            shown,
            "the registry has no such image or refused it: check the tag in spec.image "
            "(make push REGISTRY=...), and for a private registry spec.imagePullSecrets",
        )
    if reason in ("ErrImagePull", "ImagePullBackOff") and _UNREACHABLE.search(text):
        registry = f"the registry {registry_of(image)}" if image else "its registry"
        return DeadEnd(
            reason,
            shown,
            f"{registry} does not answer: check that it runs and that the nodes reach "
            "it, or correct the registry in spec.image (make push REGISTRY=...)",
            unreachable=True,
        )
    if reason == "Unschedulable" and (claim := _CLAIM.search(text)):
        return DeadEnd(
            reason,
            f'PersistentVolumeClaim "{claim.group(1)}"',
            "it does not exist in the job's namespace: create it, or correct "
            "spec.checkpoint.claimName",
        )
    if reason == "CreateContainerConfigError":
        found = _REFERENCE.search(text)
        if found:
            kind = "Secret" if found.group(1).lower() == "secret" else "ConfigMap"
            return DeadEnd(
                reason,
                f'{kind} "{found.group(2)}"',
                f"it does not exist in the job's namespace: create it (kubectl create "
                f"{kind.lower()} ...); the spec refers to none (spec.env holds plain values), "
                "so whatever added the reference to the pod (an admission webhook) names it",
            )
    if reason in MOUNT_REASONS:
        return _mount_dead_end(reason, text)
    return None


MOUNT_REASONS = ("FailedMount", "FailedAttachVolume")
"""The kubelet's (and the attach controller's) Warning events for a volume that does not
mount: the pod stays in ContainerCreating, and its container says no more than that."""
_VOLUME = re.compile(r'for volume "([^"]+)"|unmounted volumes=\[([^\]]+)\]')


def mount_warning(events: Iterable[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(reason, message) of the newest FailedMount or FailedAttachVolume among a pod's
    events (oldest first), for `dead_end`: a pod in ContainerCreating says no more."""
    mounts = [e for e in events if e.get("reason") in MOUNT_REASONS]
    if not mounts:
        return None
    return str(mounts[-1].get("reason")), " ".join(str(mounts[-1].get("message") or "").split())


CHECKPOINT_FIX = (
    "the checkpoint volume (spec.checkpoint.claimName) cannot be mounted on the node: fix "
    "the claim's PersistentVolume (a hostPath that is not on the node, storage the node "
    "cannot attach) or set spec.checkpoint.claimName to a claim that mounts"
)
_OWN_VOLUMES = {
    "script": "the job's own ConfigMap of spec.script is missing or unreadable: resubmit the "
    "job (tflaunch submit recreates it)",
    "tmp": "the node cannot create the pod's emptyDir: kubectl describe pod says why",
    "dshm": "the node cannot create the pod's emptyDir: kubectl describe pod says why",
}
"""The pod's volumes other than the checkpoint claim (launcher/core/templates/job.yaml.j2).
The kubelet names a claim's volume by its PersistentVolume, and the checkpoint claim is
the only claim a worker mounts: any other name is its volume."""


def _mount_dead_end(reason: str, message: str) -> DeadEnd:
    found = _VOLUME.search(message)
    names = (found.group(1) or found.group(2) or "").split() if found else []
    volume = names[0] if names else None
    if volume is None:
        return DeadEnd(reason, "a volume", "kubectl describe pod says which volume and why")
    return DeadEnd(reason, f'volume "{volume}"', _OWN_VOLUMES.get(volume, CHECKPOINT_FIX))


def sentence(worker: int, end: DeadEnd, message: str | None) -> str:
    """One line: the worker, the object, the kubelet's own words, the fix."""
    said = f": {message}" if message else ""
    verdict = "cannot pull its image" if end.unreachable else "will never start"
    return f"worker {worker} {verdict}: {end.culprit} ({end.reason}{said}); {end.fix}"
