"""Restarts in place (spec.restart inPlace), as the wrappers log them.

A restart in place replaces no pod and no container, so neither the Job nor the pods count
it: only the wrappers know. At every generation the group enters after a failure, each
wrapper prints one `TFLAUNCH_RESTART {...}` line (`contract.restart_line`) naming the
generation and every worker whose program failed by itself in the generation before (its
error line, ending with the wrapper's "(the program exited 1)" or "(the program was killed
by SIGKILL)"). `tflaunch status`/`wait` and the operator read these lines from the tail of
the chief's log, like the progress lines, and say each one in `launcher.core.worker_end`'s
words: one reading, the same sentence everywhere. Pure: lines in, values out.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from launcher.core import contract, untrusted, worker_end
from launcher.core.worker_end import WorkerEnd


@dataclasses.dataclass(frozen=True)
class Restart:
    """One group restart in place: the generation the group went to, and why."""

    generation: int
    failed: tuple[tuple[int, str], ...] = ()
    """(worker, its program's error line) of every worker whose program failed by itself;
    empty when none did (a peer's wrapper was replaced)."""

    @property
    def ends(self) -> list[WorkerEnd]:
        """The failed programs as `WorkerEnd`s: the signal or exit code from the wrapper's
        suffix of the error line."""
        return [_end(worker, error) for worker, error in self.failed]

    @property
    def culprit(self) -> WorkerEnd | None:
        return worker_end.culprit(self.ends) or next(iter(self.ends), None)

    def describe(self) -> str:
        """`worker 1 was killed by SIGKILL: ...`, the culprit first, in the words of
        `worker_end.account` (a group's failure)."""
        ends = self.ends
        if not ends:
            return "a worker's wrapper was replaced (its container or pod restarted)"
        if not any(end.failed for end in ends):
            return "; ".join(f"worker {e.index}: {e.last_error}" for e in ends)
        return worker_end.account(ends)

    def words(self) -> str:
        """`restart in place 2: worker 1 was killed by SIGKILL: ...`: the operator's
        status.lastRestartInPlace and `status -o json`'s lastRestartInPlace."""
        return f"restart in place {self.generation}: {self.describe()}"


def _end(worker: int, error: str) -> WorkerEnd:
    match = worker_end.PROGRAM_EXIT.search(error)
    code = int(match.group("code")) if match and match.group("code") else None
    signal = worker_end.program_signal(error)
    return WorkerEnd(worker, code, signal=signal, last_error=error)


def parse_line(line: str) -> Restart | None:
    """The restart in one log line (wherever the prefix is in it); None for any other."""
    _, found, rest = line.partition(contract.RESTART_LINE_PREFIX)
    if not found:
        return None
    try:
        document = json.loads(rest.strip())
    except ValueError:
        return None
    return from_document(document)


def from_document(document: Any) -> Restart | None:
    if not isinstance(document, Mapping):
        return None
    generation = document.get("generation")
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 1:
        return None
    failed = []
    for item in document.get("failed") or ():
        if isinstance(item, Mapping) and isinstance(item.get("worker"), int):
            error = untrusted.cut(str(item.get("error") or "")).strip()
            failed.append((int(item["worker"]), error.splitlines()[-1] if error else ""))
    return Restart(generation, tuple(failed))


def restarts(lines: Iterable[str]) -> list[Restart]:
    """Every restart in `lines` (a log tail), one per generation, in order."""
    by_generation: dict[int, Restart] = {}
    for line in lines:
        found = parse_line(line)
        if found is not None:
            by_generation.setdefault(found.generation, found)
    return [by_generation[g] for g in sorted(by_generation)]


def count(found: Sequence[Restart], generation: int | None = None) -> int:
    """The group restarts in place so far: the newest generation seen in a restart line or
    a progress line (an older restart's line may have left the log tail)."""
    newest = max((r.generation for r in found), default=0)
    return max(newest, generation or 0)
