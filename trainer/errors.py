"""Errors that know their exit code.

The Job's podFailurePolicy reads the exit code of `python -m trainer` (see
`launcher.core.contract`): a configuration error fails the Job at once, anything else may be
retried. Raising the right subclass is therefore the whole error-handling policy; only
`trainer.main` turns them into a log line and an exit code.
"""

from __future__ import annotations

from launcher.core import contract


class TrainerError(Exception):
    """A failure with a one-paragraph message meant for the user, not a traceback."""

    exit_code: int = contract.EXIT_TRANSIENT


class ConfigError(TrainerError):
    """Retrying cannot help: bad TF_CONFIG, missing data, wrong batch, missing GPUs."""

    exit_code = contract.EXIT_CONFIG_ERROR


class RendezvousTimeout(TrainerError):
    """Some peers never became reachable within --rendezvous-timeout."""

    exit_code = contract.EXIT_RENDEZVOUS_TIMEOUT


class TransientError(TrainerError):
    """A peer died or a collective timed out; the group may succeed when restarted."""

    exit_code = contract.EXIT_TRANSIENT
