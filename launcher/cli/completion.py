"""Shell completion of job names from the cluster (`tflaunch completion` prints the script).

The script a shell sources calls tflaunch back with `_TFLAUNCH_COMPLETE` set (click's
protocol); flags and commands complete from the CLI's own definition. A job NAME completes
from `tflaunch list -o name` run as a child process under a short deadline
(`$TFLAUNCH_COMPLETION_TIMEOUT`, default 3 s): an unreachable API server, or a kubeconfig
credential plugin that waits for a login, must never hang the shell, and a child process
(with whatever it started) can be killed outright where a thread blocked in a read cannot.
Past the deadline, or on any error, there is simply nothing to complete.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.shell_completion import CompletionItem

F = TypeVar("F", bound=Callable[..., Any])

COMPLETE_VAR = "_TFLAUNCH_COMPLETE"
"""click's variable for the program `tflaunch` (`_<PROG>_COMPLETE`)."""
TIMEOUT_VAR = "TFLAUNCH_COMPLETION_TIMEOUT"
DEFAULT_TIMEOUT = 3.0
_CONNECTION_FLAGS = (
    ("-n", "namespace"),
    ("--kubeconfig", "kubeconfig"),
    ("--context", "kube_context"),
)


def job_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The tflaunch jobs of the namespace (the -n, --kubeconfig and --context typed so
    far) whose name starts with `incomplete`; none past the deadline."""
    argv = [sys.executable, "-m", "launcher", "list", "-o", "name"]
    for flag, key in _CONNECTION_FLAGS:
        if ctx.params.get(key):
            argv += [flag, str(ctx.params[key])]
    names = _run_quietly(argv, _timeout())
    return [CompletionItem(n) for n in names.split() if n.startswith(incomplete)]


def job_name_argument(required: bool = True) -> Callable[[F], F]:
    """The NAME argument of a command about one job, completed from the cluster."""
    return click.argument("name", required=required, shell_complete=job_names)


def _timeout() -> float:
    try:
        return max(0.1, float(os.environ.get(TIMEOUT_VAR, DEFAULT_TIMEOUT)))
    except ValueError:
        return DEFAULT_TIMEOUT


def _run_quietly(argv: list[str], timeout: float) -> str:
    """stdout of `argv`, or "" when it fails or outlives `timeout` (then its whole process
    group is killed)."""
    env = {k: v for k, v in os.environ.items() if k != COMPLETE_VAR and not k.startswith("COMP_")}
    try:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
    except OSError:
        return ""
    try:
        out, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        if child.stdout is not None:
            child.stdout.close()  # not read: a grandchild outside the group may hold it
        child.wait()
        return ""
    return out if child.returncode == 0 else ""
