"""One `tflaunch local` run per workdir.

Two runs in one workdir would share its checkpoints, model and logs: the second could restore
the first's checkpoint, and both would "succeed" on a mix of each other's work. The run holds
an exclusive `flock` on `WORKDIR/.tflaunch.lock` while its workers run. The kernel drops the
lock when the holder exits, however it exits (SIGKILL included), so a stale lock file from a
killed run never blocks the next one; the pid written in it is only there to name the holder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from launcher.core.errors import SpecError

LOCK_FILE = ".tflaunch.lock"


@contextlib.contextmanager
def held(workdir: Path) -> Iterator[None]:
    """Hold `workdir`'s lock for the block; SpecError (exit 2) when another run holds it."""
    path = workdir / LOCK_FILE
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise SpecError("--workdir", _in_use(workdir, _holder(descriptor))) from None
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


def _holder(descriptor: int) -> int | None:
    """The pid the running holder wrote, when it reads as one."""
    text = os.pread(descriptor, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _in_use(workdir: Path, pid: int | None) -> str:
    who = f"another tflaunch local (pid {pid})" if pid else "another tflaunch local"
    return (
        f"{workdir} is in use by {who}, and two runs in one workdir would mix their "
        "checkpoints and logs; wait for it to end, or give this run its own --workdir DIR"
    )
