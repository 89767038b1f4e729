"""How a worker ended, which worker is to blame, and the words for it: decided here once.

A worker's end is one value (`WorkerEnd`), built from a pod's trainer container
(`from_pod`) or from a local process (`launcher.local.runner`) alike. `culprit` names the
group's cause the same way for `tflaunch local`, `status`/`wait` and the operator, whatever
order the exits arrived in, and `account` says it in one sentence whose words come from the
exit-code table (`launcher.core.exit_policy`). `GroupEnd` reads one attempt of the whole
group (local mode's processes). Pure: values in, values out.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import signal as signals
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from launcher.core import contract, exit_policy, reading, untrusted
from launcher.core.exit_policy import GroupAction
from launcher.core.timestamps import parse_time

SIGNALLED = 128
"""A container's exit code above this is 128 + the signal that killed it."""
PROGRAM_SIGNAL = re.compile(r"\(the program was killed by (?P<signal>SIG[A-Z0-9]+)\)$")
"""The wrapper's last error when the program died of a signal (`trainer.run`): the wrapper
itself then exits 1, so its exit code does not say it."""
PROGRAM_EXIT = re.compile(r" ?\(the program (?:exited (?P<code>-?\d+)|was killed by SIG\w+)\)$")
NEVER = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)


@dataclasses.dataclass(frozen=True)
class WorkerEnd:
    """How one worker ended."""

    index: int
    exit_code: int | None
    """None: it did not exit on its own (stopped with the group). Negative: a local process
    killed by that signal."""
    signal: str | None = None
    """The signal that killed the worker or its program (`SIGKILL`), when it was one."""
    last_error: str | None = None
    """Its last error line: a pod's termination message, a process's last ERROR line."""
    finished_at: datetime.datetime | None = None
    reason: str | None = None
    """The kubelet's word for the container's end (`OOMKilled`), when it ran in a pod."""
    memory_limit: str | None = None
    """The container's memory limit as its spec writes it (`4Gi`), for an OOM kill's advice."""
    started_at: datetime.datetime | None = None
    """When its container started (a pod's), to tell the group's attempts apart."""

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> WorkerEnd | None:
        """The end of a worker pod's trainer container; None while it has not ended."""
        state = reading.terminated(pod)
        index = reading.pod_index(pod)
        if state is None or index is None:
            return None
        code = state.get("exitCode")
        code = code if isinstance(code, int) else None
        message = untrusted.cut(str(state.get("message") or "")).strip()
        last_error = message.splitlines()[-1].strip() if message else None
        killed = code is not None and code > SIGNALLED
        return cls(
            index=index,
            exit_code=code,
            signal=signal_name(code - SIGNALLED) if killed and code else program_signal(last_error),
            last_error=last_error,
            finished_at=parse_time(state.get("finishedAt")),
            reason=str(state.get("reason") or "") or None,
            memory_limit=_memory_limit(pod),
            started_at=parse_time(state.get("startedAt")),
        )

    @property
    def failed(self) -> bool:
        """Whether the worker ended badly: neither success, nor stopped, nor a preemption."""
        if self.signal or (self.exit_code is not None and self.exit_code < 0):
            return True
        if self.exit_code in (None, contract.EXIT_OK):
            return False
        return exit_policy.group_action(self.exit_code) != "resume"

    @property
    def rank(self) -> int:
        """How likely this end is the group's cause rather than a consequence (lower:
        likelier): a signal (the OOM killer, kill -9), then an exit the table fails (a
        configuration error), then a rendezvous timeout (the peers never came), then any
        other exit (most often a survivor's DEADLINE_EXCEEDED after its peer died)."""
        if self.signal or (self.exit_code is not None and self.exit_code < 0):
            return 0
        if exit_policy.group_action(self.exit_code) == "fail":
            return 1
        return 2 if self.exit_code == contract.EXIT_RENDEZVOUS_TIMEOUT else 3

    def how(self, step: int | None = None) -> str:
        """The end in words: `was killed by SIGKILL`, `exited 78 (configuration error)`; an
        OOM kill with the `step` it reached, when known."""
        code = self.exit_code
        if self.reason == "OOMKilled":
            limit = f" at its memory limit {self.memory_limit}" if self.memory_limit else ""
            reached = f", at step {step}" if step is not None else ""
            return (
                f"was OOMKilled (exit {code}){limit}{reached}: raise "
                "spec.resources.limits.memory or lower spec.trainer.globalBatchSize"
            )
        if self.signal:
            return f"was killed by {self.signal}"
        if code is None:
            return "was stopped"
        if code < 0:
            return f"was killed by {signal_name(-code)}"
        rule = exit_policy.rule_for(code)
        return f"exited {code} ({rule.said})" if rule else f"exited {code}"

    def detail(self) -> str:
        """Its last error, without the wrapper's "(the program exited N)" when that says no
        more than the worker's own end (the program's 78 is the worker's 78)."""
        error = (self.last_error or "").strip()
        match = PROGRAM_EXIT.search(error)
        if match is None:
            return error
        said = match.group("code")
        if (said is None and self.signal) or (said is not None and said == str(self.exit_code)):
            return error[: match.start()]
        return error

    def describe(self, step: int | None = None) -> str:
        """`worker 1 was killed by SIGKILL`, with its last error when it has one."""
        detail = self.detail()
        return f"worker {self.index} {self.how(step)}" + (f": {detail}" if detail else "")


def signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


def program_signal(last_error: str | None) -> str | None:
    """The signal the wrapper says killed the program, from its last error line."""
    match = PROGRAM_SIGNAL.search(last_error or "")
    return match.group("signal") if match else None


def ranked(ends: Iterable[WorkerEnd]) -> list[WorkerEnd]:
    """The failed `ends`, the culprit first: the likeliest kind of end (`WorkerEnd.rank`),
    then the first to finish, then the lowest index."""
    failed = (end for end in ends if end.failed)
    return sorted(failed, key=lambda e: (e.rank, e.finished_at or NEVER, e.index))


def culprit(ends: Iterable[WorkerEnd]) -> WorkerEnd | None:
    """The group's cause among `ends` (`ranked`); None when no worker failed."""
    first = ranked(ends)[:1]
    return first[0] if first else None


def account(ends: Iterable[WorkerEnd]) -> str:
    """The group's failure in one sentence: the culprit with its last error, then the other
    failed workers by their end only (usually survivors that saw it die)."""
    failed = ranked(ends)
    if not failed:
        return "no worker failed"
    cause, *others = failed
    text = cause.describe()
    if others:
        text += " (" + ", ".join(f"worker {e.index} {e.how()}" for e in others) + " too)"
    return text


def not_retried(end: WorkerEnd | None) -> str | None:
    """Why the group is not restarted after `end`, from the table, when its exit fails the
    group (`; not retried: a restart cannot fix a configuration error`)."""
    rule = exit_policy.rule_for(end.exit_code) if end and not end.signal else None
    return rule.why if rule and rule.group == "fail" else None


def ends_of(pods: Iterable[Mapping[str, Any]]) -> list[WorkerEnd]:
    """The ends of the worker pods that have ended."""
    return [end for pod in pods if (end := WorkerEnd.from_pod(pod)) is not None]


def _memory_limit(pod: Mapping[str, Any]) -> str | None:
    containers = reading.spec(pod).get("containers") or []
    trainer = next((c for c in containers if c.get("name") == "trainer"), None)
    trainer = trainer or (containers[0] if containers else {})
    limit = ((trainer.get("resources") or {}).get("limits") or {}).get("memory")
    return None if limit is None else str(limit)


@dataclasses.dataclass(frozen=True)
class GroupEnd:
    """How one attempt of the whole group ended: every worker's end, and the step each said
    it saved at before exiting EXIT_PREEMPTED."""

    ends: tuple[WorkerEnd, ...]
    saved_steps: tuple[int | None, ...] = ()

    @classmethod
    def of(
        cls,
        codes: Sequence[int | None],
        last_errors: Sequence[str | None] = (),
        saved_steps: Sequence[int | None] = (),
        signals: Sequence[str | None] = (),
        finished: Sequence[datetime.datetime | None] = (),
    ) -> GroupEnd:
        """The attempt of workers 0..N-1 with these exit codes (None: stopped by us), last
        errors, saved steps, program signals and end times (each shorter sequence: None)."""

        def at(values: Sequence[Any], index: int) -> Any:
            return values[index] if index < len(values) else None

        ends = tuple(
            WorkerEnd(index, code, signal=at(signals, index), last_error=at(last_errors, index),
                      finished_at=at(finished, index))
            for index, code in enumerate(codes)
        )  # fmt: skip
        return cls(ends, tuple(saved_steps))

    @property
    def exit_codes(self) -> tuple[int | None, ...]:
        return tuple(end.exit_code for end in self.ends)

    @property
    def succeeded(self) -> bool:
        return all(code == contract.EXIT_OK for code in self.exit_codes)

    @property
    def saved_step(self) -> int | None:
        """Where the group resumes after a preemption (the chief's word first)."""
        return next((step for step in self.saved_steps if step is not None), None)

    @property
    def culprit(self) -> WorkerEnd | None:
        return culprit(self.ends)

    @property
    def same_program_error(self) -> str | None:
        """The error every worker's program ended with, when it is one and the same Python
        exception (a NameError at import, a bad argument): the program's own, which a
        restart repeats. Not a signal, not TensorFlow's word for a lost peer or a timeout."""
        if set(self.exit_codes) != {contract.EXIT_TRANSIENT} or any(e.signal for e in self.ends):
            return None
        reasons = {end.detail() for end in self.ends}  # without "(the program exited 1)"
        if len(reasons) != 1:
            return None
        (reason,) = reasons
        return reason if exit_policy.own_program_error(reason) else None

    @property
    def divergence(self) -> reading.Divergence | None:
        """A worker that failed in a collective after its peers had finished the program:
        the programs took different paths, which a restart repeats (`reading.Divergence`)."""
        return reading.divergence(
            (e.index for e in self.ends if e.exit_code == contract.EXIT_OK),
            ((e.index, e.last_error) for e in self.ends
             if e.exit_code not in (contract.EXIT_OK, None) and not e.signal),
        )  # fmt: skip

    def describe(self) -> str:
        return account(self.ends)

    def next_step(
        self, restarts_so_far: int, backoff_limit: int, success: str = "allWorkers"
    ) -> GroupAction:
        """What the group does after this attempt: the exit-code table's decision
        (`reading.group_outcome`, the operator's too) under spec.successPolicy `success`,
        with the same program error in every worker, or a divergence, as a repeat."""
        return reading.group_outcome(
            self.exit_codes,
            restarts=restarts_so_far,
            backoff_limit=backoff_limit,
            repeats=self.same_program_error is not None or self.divergence is not None,
            success=success,
        )
