"""Where a local run keeps what a pod keeps on its volumes, and what is written there before
the workers start (the program's files, each attempt's log files, each worker's own working
directory)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from launcher.api.spec import MultiWorkerJob
from launcher.core import contract, script

WRITTEN_LIST = ".tflaunch-files"
"""In WORKDIR/script/: the program files tflaunch wrote there, removed at the next run when
the program no longer has them (and nothing else: the directory may hold the user's files)."""


@dataclasses.dataclass(frozen=True)
class LocalPaths:
    """A local run's directories, all under its workdir."""

    workdir: Path

    @property
    def checkpoint_dir(self) -> Path:
        return self.workdir / "checkpoints"

    @property
    def model_dir(self) -> Path:
        return self.workdir / "model"

    @property
    def result_file(self) -> Path:
        return self.model_dir / contract.RESULT_FILE

    @property
    def script_dir(self) -> Path:
        """Where spec.script is written (a pod mounts it from a ConfigMap)."""
        return self.workdir / "script"

    @property
    def tensorboard_dir(self) -> Path:
        """The chief's event files (`workload.tensorboard_dir` beside the model)."""
        return self.workdir / "tensorboard"

    @property
    def logs_dir(self) -> Path:
        return self.workdir / "logs"

    def log_file(self, index: int) -> Path:
        """Worker `index`'s full output, every attempt appended."""
        return self.logs_dir / f"worker-{index}.log"

    @property
    def workers_dir(self) -> Path:
        return self.workdir / "workers"

    def worker_dir(self, index: int) -> Path:
        """Worker `index`'s working directory: its own, as a pod has its own filesystem, so
        that what a program writes to `./` neither clashes between workers nor lands in the
        caller's directory."""
        return self.workers_dir / f"worker-{index}"

    def prepare(self, job: MultiWorkerJob) -> None:
        """Every directory the workers need, and spec.script's files.

        Raises:
            OSError: the workdir is not writable (read-only, full).
        """
        for directory in (self.checkpoint_dir, self.model_dir, self.logs_dir):
            directory.mkdir(parents=True, exist_ok=True)
        for index in range(job.spec.workers):
            self.worker_dir(index).mkdir(parents=True, exist_ok=True)
        write_script(job, self)


def not_empty(directory: Path) -> bool:
    return directory.is_dir() and any(directory.iterdir())


def resume_point(paths: LocalPaths) -> str:
    """Where the restarted group starts: only a checkpoint that exists is resumed from."""
    if not_empty(paths.checkpoint_dir):
        return f"resuming from the checkpoint in {paths.checkpoint_dir}"
    return f"restarting from the beginning (no checkpoint in {paths.checkpoint_dir})"


@contextlib.contextmanager
def log_files(paths: LocalPaths, workers: int, attempt: int) -> Iterator[list[TextIO]]:
    """Each worker's log file, opened for one attempt (0-based), which starts with a header
    line."""
    with contextlib.ExitStack() as stack:
        files: list[TextIO] = []
        for index in range(workers):
            log_file = stack.enter_context(
                paths.log_file(index).open("a", encoding="utf-8", errors="replace")
            )
            log_file.write(f"--- tflaunch: worker {index}, attempt {attempt + 1} ---\n")
            files.append(log_file)
        yield files


def write_script(job: MultiWorkerJob, paths: LocalPaths) -> None:
    """spec.script's files where the workers run them, with the layout a pod finds in its
    ConfigMap (no file of an earlier run left beside them): the entry file's directory is
    the first on the program's import path, so `import mnist_setup` finds its neighbour."""
    if job.spec.script is None:
        return
    files = script.all_files(job.spec.script)
    written = paths.script_dir / WRITTEN_LIST
    with contextlib.suppress(OSError):  # only what tflaunch wrote there itself goes
        for rel in written.read_text(encoding="utf-8").splitlines():
            if rel and rel not in files and ".." not in rel.split("/"):
                (paths.script_dir / rel).unlink(missing_ok=True)
    for rel, text in files.items():
        target = paths.script_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    written.write_text("".join(f"{rel}\n" for rel in files), encoding="utf-8")
