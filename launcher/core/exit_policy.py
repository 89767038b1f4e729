"""The exit-code table: what each trainer exit means for its Job and for the worker group.

One table, three readers: `render` writes it into every Job's podFailurePolicy, `tflaunch
local` and the operator decide a group's next step from it (`launcher.core.reading.
group_outcome`). Change an exit's meaning here and all three change together
(tests/operator/test_one_reading.py proves they agree for every exit code).
"""

from __future__ import annotations

import dataclasses
import signal
from typing import Any, Literal

from launcher.core import contract

JobAction = Literal["FailJob", "Ignore", "Count"]
"""What the Job controller does with a pod's exit (podFailurePolicy's actions; Count is the
default: the failure counts against backoffLimit)."""
GroupAction = Literal["done", "resume", "restart", "fail"]
"""What happens to the whole worker group after the exit."""


@dataclasses.dataclass(frozen=True)
class ExitRule:
    code: int
    job: JobAction
    group: GroupAction
    said: str
    """The exit in a few words, printed after the code by every reader: `exited 78
    (configuration error)` (`launcher.core.worker_end`)."""
    why: str
    """What the group does about it and why, said once in a failure's last line."""


RULES = (
    ExitRule(
        contract.EXIT_CONFIG_ERROR,
        "FailJob",
        "fail",
        "configuration error",
        "not retried: a restart cannot fix it",
    ),
    ExitRule(
        contract.EXIT_RESTARTS_SPENT,
        "FailJob",
        "fail",
        "restart budget spent",
        "not retried: the group restarted spec.backoffLimit times already",
    ),
    ExitRule(
        contract.EXIT_PREEMPTED,
        "Ignore",
        "resume",
        "preempted, saved",
        "told to stop and saved first: every worker resumes at the saved step, no retry used",
    ),
    ExitRule(
        contract.EXIT_RENDEZVOUS_TIMEOUT,
        "Count",
        "restart",
        "peers never came",
        "the peers never became reachable: usually a consequence of a peer that failed first",
    ),
)
"""Exit codes with a meaning of their own; 0 is success, any other code may be retried."""

_BY_CODE = {rule.code: rule for rule in RULES}


def rule_for(code: int | None) -> ExitRule | None:
    """The table's rule for `code`, when the code has a meaning of its own."""
    return _BY_CODE.get(code) if code is not None else None


def why(code: int) -> str:
    """What the group does about exit `code` and why (its rule's `why`; "" without one)."""
    rule = rule_for(code)
    return rule.why if rule else ""


def group_action(code: int | None) -> GroupAction:
    """What one worker's exit asks of the group (None: it did not exit on its own)."""
    if code == contract.EXIT_OK:
        return "done"
    rule = _BY_CODE.get(code) if code is not None else None
    return rule.group if rule else "restart"


def job_action(code: int) -> JobAction | None:
    """What the rendered podFailurePolicy makes the Job controller do with `code` (None: the
    pod succeeded)."""
    if code == contract.EXIT_OK:
        return None
    rule = _BY_CODE.get(code)
    return rule.job if rule else "Count"


KILLED_CONTAINER_EXIT = 128 + int(signal.SIGKILL)
"""How a container ends when its first process, the worker wrapper, is SIGKILLed: `crictl
stop` or `kill` of the container, or the whole container OOM-killed (cgroup v2's
memory.oom.group). With spec.restart inPlace the kubelet restarts it in its pod."""


def container_restart_rules() -> list[dict[str, Any]]:
    """The trainer container's restartPolicyRules with spec.restart inPlace (Kubernetes'
    ContainerRestartRules, beta and on by default since 1.35): a container whose wrapper was
    SIGKILLed starts again in the same pod, where its new wrapper joins the group's next
    generation (trainer/generations.py), instead of failing the pod into a recreation. Every
    other exit ends the container: the wrapper already restarted the program for what can
    be restarted, and 78/76/79 have their meaning in the podFailurePolicy. A pod being
    deleted (preemption, eviction) is never restarted by the kubelet."""
    codes = {"operator": "In", "values": [KILLED_CONTAINER_EXIT]}
    return [{"action": "Restart", "exitCodes": codes}]


def restart_rules_dropped(stored_job: dict[str, Any] | None) -> bool:
    """Whether the API server stored a Job rendered with `container_restart_rules` without
    them: a cluster before Kubernetes 1.35, or with ContainerRestartRules off, drops the
    field it does not serve. There a killed container fails its pod, which is recreated."""
    if stored_job is None:
        return False
    template = stored_job.get("spec", {}).get("template", {}).get("spec", {})
    return not any(c.get("restartPolicyRules") for c in template.get("containers", []))


RESTART_RULES_SINCE = "1.35"
"""The first Kubernetes whose API server keeps a container's restartPolicyRules by default."""


def restart_rules_refused(message: str) -> bool:
    """Whether an API server's 422 refused the trainer container's restartPolicy: Kubernetes
    1.28 to 1.33 know the field for init containers (sidecars) only and forbid it on a
    regular container, where 1.34 with the feature gate off drops it."""
    return "restartPolicy" in message and "non-init containers" in message


def drop_container_restart_rules(job: dict[str, Any]) -> bool:
    """Remove the container restart rules from a rendered Job, in place, as a server that
    does not serve them stores it; whether it had any."""
    containers = job.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    had = False
    for container in containers:
        had = container.pop("restartPolicyRules", None) is not None or had
        if had:
            container.pop("restartPolicy", None)
    return had


RESTART_RULES_DROPPED = (
    "this cluster dropped the trainer container's restartPolicyRules (Kubernetes before 1.35, "
    "or the ContainerRestartRules feature gate off): a program that fails still restarts in "
    "place, but a killed container fails its pod, which is recreated, and its new wrapper "
    "joins the group's next generation"
)


def pod_failure_policy(container: str = "trainer") -> dict[str, Any]:
    """The Job's podFailurePolicy: the table's rules, then an eviction (a pod condition
    DisruptionTarget: not the trainer's fault) ignored."""
    rules: list[dict[str, Any]] = [
        {
            "action": rule.job,
            "onExitCodes": {"containerName": container, "operator": "In", "values": [rule.code]},
        }
        for rule in RULES
        if rule.job != "Count"  # the Job controller's default: no rule needed
    ]
    rules.append(
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    )
    return {"rules": rules}


# --- a failed program's last words: its own error, or a lost peer's -------------------


PEER_ERRORS = frozenset(
    {"UnavailableError", "DeadlineExceededError", "AbortedError", "CancelledError",
     "UnknownError", "InternalError", "FailedPreconditionError"}
)  # fmt: skip
"""TensorFlow's exceptions for a peer that died, froze or timed out: every survivor can
report the same one, yet it is a fault of the group, which a restart may fix."""


def peer_error(reason: str | None) -> str | None:
    """The exception's name when a worker's last error is TensorFlow's word for a lost peer
    (`UnavailableError: ... Collective ops is aborted by ...`), not the program's own."""
    match = contract.EXCEPTION_LINE.match((reason or "").strip())
    return match.group("name") if match and match.group("name") in PEER_ERRORS else None


def own_program_error(reason: str | None) -> bool:
    """Whether `reason` is the program's own Python exception (`NameError: name 'modle' is
    not defined`), which every worker reaching that line repeats after any restart. Not
    TensorFlow's word for a lost peer (`peer_error`), which every survivor of a group fault
    reports alike, nor a line that is no exception (the built-in trainer's "training failed
    because a peer died", a stall, a signal)."""
    line = (reason or "").strip()
    return contract.EXCEPTION_LINE.match(line) is not None and peer_error(line) is None
