"""The group's generation on the checkpoint volume, for a plain Job's recreated pods
(spec.restart inPlace; docs/restart-in-place.md, "Recreated pods").

A wrapper that is new because its pod was recreated learns the group's generation from the
peers that stayed; when the Job controller recreated every pod, no peer is left to ask, and
the pods hold no count (no API token, nothing in the pod the Job controller counts). So each
wrapper writes the generation it enters, and the last restart it named, to a file on the
checkpoint volume, keyed by the Job's uid ($TFLAUNCH_JOB_UID, the downward API): a
recreated pod of the same Job continues the count, and a new Job that uses the same
directory (spec.checkpoint.run naming an earlier run) starts at 0.

One file per worker, written only by that worker: no two wrappers write one file. Anything
unreadable (absent, another Job's, half-written by an older image) reads as nothing stored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from launcher.core import contract

log = logging.getLogger("tflaunch.worker")

NAME = ".tflaunch-generation-{worker}.json"


@dataclasses.dataclass(frozen=True)
class Stored:
    """What a worker's wrapper last wrote: the generation, the last restart it named."""

    generation: int
    failed: tuple[tuple[int, str], ...] = ()
    """The last restart's failed programs (worker, error line), as in its TFLAUNCH_RESTART
    line (`contract.restart_line`); empty before the first."""
    restart: int = 0
    """The generation that restart went to (0: none yet)."""


def path(checkpoint_dir: str, worker: int) -> Path:
    return Path(checkpoint_dir) / NAME.format(worker=worker)


def read(checkpoint_dir: str | None, worker: int, job_uid: str) -> Stored | None:
    """What this worker stored for Job `job_uid`; None without a directory or a uid, or when
    the file is absent, unreadable or another Job's."""
    if not checkpoint_dir or not job_uid:
        return None
    try:
        document = json.loads(path(checkpoint_dir, worker).read_text(encoding="utf-8"))
        if document["jobUid"] != job_uid:
            return None
        failed = tuple((int(w), str(e)) for w, e in document["failed"])
        stored = Stored(int(document["generation"]), failed, int(document["restart"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return stored if stored.generation >= 0 else None


def write(checkpoint_dir: str | None, worker: int, job_uid: str, stored: Stored) -> None:
    """Store `stored` for Job `job_uid`, whole or not at all (a temporary file renamed over
    the old one). A write that fails is logged, not fatal: only a later recreation of every
    pod would miss it."""
    if not checkpoint_dir or not job_uid:
        return
    target = path(checkpoint_dir, worker)
    # A random suffix: every pod has its own PID namespace, so PIDs repeat across workers.
    temporary = target.with_name(f"{target.name}.{secrets.token_hex(4)}.tmp")
    document = {
        "jobUid": job_uid,
        "generation": stored.generation,
        "restart": stored.restart,
        "failed": [list(item) for item in stored.failed],
    }
    try:
        temporary.write_text(json.dumps(document), encoding="utf-8")
        os.replace(temporary, target)
    except OSError as e:
        log.warning("cannot store the generation in %s (%s): a recreated group starts at 0",
                    target, e)  # fmt: skip
        with contextlib.suppress(OSError):
            temporary.unlink()


def entered(before: Stored | None, generation: int, failed: Sequence[tuple[int, str]]) -> Stored:
    """What to store once the group entered `generation` after the restart `failed` named
    (empty: none named, the last named one is kept)."""
    if failed:
        return Stored(generation, tuple(failed), generation)
    if before is None:
        return Stored(generation)
    return dataclasses.replace(before, generation=generation)


class Keeper:
    """One wrapper's file: read once at its start, written at every generation it enters."""

    def __init__(self, checkpoint_dir: str | None, worker: int, job_uid: str) -> None:
        self._where = (checkpoint_dir, worker, job_uid)
        self.stored = read(checkpoint_dir, worker, job_uid)

    @property
    def generation(self) -> int:
        """The generation to continue at: the stored one, else 0."""
        return self.stored.generation if self.stored else 0

    def say_last_restart(self) -> None:
        """Say the generation continued, and print the last stored restart's
        TFLAUNCH_RESTART line again: a recreated pod's log is where status, wait and the
        operator read it."""
        if self.stored is None or not self.stored.generation:
            return
        log.info("continuing this Job's generation %d (from its checkpoint volume)",
                 self.stored.generation)  # fmt: skip
        if self.stored.failed:
            print(contract.restart_line(self.stored.restart, self.stored.failed), flush=True)

    def entered(self, generation: int, failed: Sequence[tuple[int, str]]) -> None:
        self.stored = entered(self.stored, generation, failed)
        write(*self._where, self.stored)
