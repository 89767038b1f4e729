"""The launcher's own errors, and the exit codes they map to.

Everything below the CLI raises these; only `launcher.cli.main` (its `main()`) turns them
into a one-line message and an exit code. Kubernetes API failures are translated into them
at the edge (`launcher.cluster`), so no caller ever sees an `ApiException` or a traceback.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence


class ExitStatus(enum.IntEnum):
    """Exit codes of the `tflaunch` command."""

    SUCCESS = 0
    ERROR = 1
    """A runtime failure: the cluster refused or could not be reached, a worker crashed."""
    BAD_INPUT = 2
    """Usage or input error: nothing was applied."""
    JOB_FAILED = 3
    """The training job ran and failed."""
    TIMEOUT = 4
    """Waiting for the job ran out of time; the job itself may still be running."""
    NEVER_STARTS = 5
    """A worker will never start (its image is absent, a Secret it needs is missing): the
    wait gave up; the job's objects are left as they are."""
    INTERRUPTED = 130


def printable(text: str) -> str:
    """`text` with every character a terminal would act on (ESC, NUL, a newline, bidi
    controls) written as its escape: user input quoted in an error cannot draw on the
    terminal or split the one line."""
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in text
    )


class TflaunchError(Exception):
    """Base of every error the CLI reports as one line."""

    exit_status = ExitStatus.ERROR


class SpecError(TflaunchError):
    """The job spec or a flag is invalid. `field` is the dotted path, e.g. spec.workers."""

    exit_status = ExitStatus.BAD_INPUT

    def __init__(self, field: str, message: str) -> None:
        self.field = printable(field)
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class SpecErrors(SpecError):
    """Several mistakes in one spec, all said at once (a spec with three mistakes used to
    take three runs); `field` and `message` are the first one's."""

    errors: tuple[SpecError, ...]

    def __init__(self, errors: Sequence[SpecError]) -> None:
        flat: list[SpecError] = []
        for error in errors:
            flat.extend(error.errors if isinstance(error, SpecErrors) else [error])
        self.errors = tuple(flat)
        self.field, self.message = flat[0].field, flat[0].message
        TflaunchError.__init__(
            self, f"{len(flat)} mistakes: " + "; ".join(str(error) for error in flat)
        )

    @classmethod
    def of(cls, errors: Sequence[SpecError]) -> SpecError:
        """The one error, or all of them."""
        return errors[0] if len(errors) == 1 else cls(errors)


class RenderError(TflaunchError):
    """A template produced something that is not a Kubernetes object (a bug, not input)."""


class ClusterError(TflaunchError):
    """The Kubernetes API failed or refused; the message says what and how to fix it."""


class TransientClusterError(ClusterError):
    """A failure of the API server, not of the request: refused connections, timeouts, 429
    and 5xx. Long-running commands retry it (`launcher.cluster.retry`).

    Args:
        message: the one line for the user when it is not retried.
        short: the reason in a few words, for "unavailable since ... (short)".
        retry_after: the server's Retry-After, in seconds, when it sent one.
    """

    def __init__(self, message: str, short: str = "", retry_after: float | None = None) -> None:
        super().__init__(message)
        self.short = short or message
        self.retry_after = retry_after


class ClusterUnreachable(TransientClusterError):
    """No answer at all: refused, DNS, timeout, TLS."""


class Unavailable(TransientClusterError):
    """The server answered that it cannot serve now (429 Too Many Requests, 5xx)."""


class Forbidden(ClusterError):
    pass


class NotFound(ClusterError):
    pass


class Conflict(ClusterError):
    pass


class SpecChanged(Conflict):
    """The job exists with another spec; a Job's pod template is immutable, so nothing was
    applied. Bad input rather than a runtime failure: change the spec back, delete, or replace."""

    exit_status = ExitStatus.BAD_INPUT


class Invalid(ClusterError):
    """The API server rejected an object (422); the message carries the server's field text."""

    exit_status = ExitStatus.BAD_INPUT


class JobFailed(TflaunchError):
    exit_status = ExitStatus.JOB_FAILED


class WaitTimeout(TflaunchError):
    exit_status = ExitStatus.TIMEOUT


class NeverStarts(TflaunchError):
    exit_status = ExitStatus.NEVER_STARTS


class WorkersFailed(TflaunchError):
    """`tflaunch local`: the worker group failed beyond its retry budget."""

    exit_status = ExitStatus.JOB_FAILED
