"""The MultiWorkerJob's Status: what the operator observed and did (types only).

The operator writes it to the status subresource; `tflaunch status/wait/list` read it back
(`launcher.core.documents.status_from_document`); the CRD's status schema is generated from
these dataclasses (`launcher.operator.crd`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal


def _field(
    key: str, doc: str, default: Any = dataclasses.MISSING, factory: Any = None, **bounds: Any
) -> Any:
    """A dataclass field with its camelCase key and doc, as in `launcher.api.spec`;
    `schema=` gives a field of free-form type its schema."""
    metadata = {"key": key, "doc": doc, "bounds": bounds}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# --- The status the operator writes ---------------------------------------------------------

Phase = Literal["Created", "Running", "Restarting", "Suspended", "Succeeded", "Failed"]
ConditionStatus = Literal["True", "False", "Unknown"]

CONDITION_TYPES: tuple[str, ...] = (
    "Created",
    "Running",
    "Restarting",
    "Suspended",
    "Succeeded",
    "Failed",
)
"""Every condition the operator maintains, in the order it lists them."""


@dataclasses.dataclass(frozen=True)
class Condition:
    """One aspect of the job's state, Kubernetes-style (metav1.Condition)."""

    type: str = _field("type", f"One of {', '.join(CONDITION_TYPES)}.")
    status: ConditionStatus = _field("status", "True, False or Unknown.")
    reason: str = _field("reason", "CamelCase reason of the last transition.", "")
    message: str = _field("message", "Human-readable details.", "")
    last_transition_time: str | None = _field(
        "lastTransitionTime", "When the status last changed (RFC 3339).", None
    )


_NUMBERS = {"type": "array", "items": {"type": "number"}}
RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        **{
            key: {"type": "number"}
            for key in (
                "test_accuracy", "test_loss", "test_examples", "epochs", "workers", "replicas",
                "global_batch_size", "steps_per_epoch", "images_per_sec", "fit_seconds",
                "restarts", "resumed_from_epoch",
            )
        },
        "history": {"type": "object", "properties": {"loss": _NUMBERS, "accuracy": _NUMBERS}},
        "weights_sha256": {"type": "string"},
        "dataset": {"type": "string"},
    },
}  # fmt: skip
"""The trainer's result line (trainer/train.py), as the status keeps it; other keys are pruned."""


@dataclasses.dataclass(frozen=True)
class ProgressStatus:
    """The chief's latest TFLAUNCH_PROGRESS line, read from its log at most every 30 s."""

    epoch: int = _field("epoch", "The epoch being trained, counted from 1.", 0)
    epochs: int = _field("epochs", "Epochs in all.", 0)
    step: int = _field("step", "Steps done in this epoch.", 0)
    steps: int = _field("steps", "Steps per epoch.", 0)
    loss: float | None = _field("loss", "The epoch's running mean training loss.", None)
    eta_seconds: float | None = _field(
        "etaSeconds", "Training time left at the measured step rate.", None
    )
    images_per_sec: float | None = _field(
        "imagesPerSec", "Global training throughput (all workers).", None
    )
    updated: str | None = _field("updated", "When the operator read it (RFC 3339).", None)
    epoch_text: str = _field("epochText", 'E.g. "2/5" (a printer column).', "")
    eta: str = _field("eta", 'The ETA in words, e.g. "1m20s" (a printer column).', "")


@dataclasses.dataclass(frozen=True)
class Status:
    """What the operator observed and did; written to the status subresource only."""

    phase: Phase | None = _field(
        "phase", "Created, Running, Restarting, Suspended, Succeeded or Failed.", None
    )
    reason: str = _field("reason", "CamelCase reason of the current phase.", "")
    message: str = _field("message", "Human-readable details of the current phase.", "")
    workers: str = _field("workers", 'Ready workers of all, e.g. "2/2" (a printer column).', "")
    workers_ready: int = _field("workersReady", "Worker pods running and ready.", 0)
    workers_total: int = _field("workersTotal", "spec.workers.", 0)
    restarts: int = _field(
        "restarts", "Whole-group restarts so far (the budget is spec.backoffLimit).", 0
    )
    preemptions: int = _field(
        "preemptions",
        "Preemptions every worker saved before (exit 79): the Job replaced the pods, which "
        "resumed at the saved step; not counted in restarts.",
        0,
    )
    last_failure: str = _field(
        "lastFailure",
        "The worker, the kubelet's reason and the chief's step of the failure the group last "
        "restarted after, e.g. `1 OOMKilled at step 240`: the same worker OOM-killed again "
        "within an epoch of that step stops the job.",
        "",
    )
    last_restart_in_place: str = _field(
        "lastRestartInPlace",
        "With spec.restart inPlace, the last group restart inside the same pods (counted in "
        "restarts) and its cause, e.g. `restart in place 2: worker 1 was killed by SIGKILL: "
        "...`, from the workers' own log line.",
        "",
    )
    last_preemption_time: str | None = _field(
        "lastPreemptionTime", "When the last counted preemption's first worker exited.", None
    )
    resumed_at_step: int | None = _field(
        "resumedAtStep", "The step the workers saved at in the last preemption.", None
    )
    start_time: str | None = _field(
        "startTime", "When the workers first ran (RFC 3339); the deadline counts from it.", None
    )
    completion_time: str | None = _field(
        "completionTime", "When the job succeeded or failed (RFC 3339).", None
    )
    result: dict[str, Any] = _field(
        "result",
        "The chief's result line (test_accuracy, test_loss, ...) once the job succeeded.",
        factory=dict,
        schema=RESULT_SCHEMA,
    )
    observed_generation: int | None = _field(
        "observedGeneration", "The metadata.generation this status reflects.", None
    )
    progress: ProgressStatus | None = _field(
        "progress", "Where training stands, from the chief's progress line.", None
    )
    conditions: tuple[Condition, ...] = _field(
        "conditions", "Created, Running, Restarting, Suspended, Succeeded, Failed.", factory=tuple
    )


# --- Reasons the operator writes (the CLI reads them too) ----------------------------------

FINISHED_PHASES: frozenset[str] = frozenset({"Succeeded", "Failed"})
INVALID_SPEC = "InvalidSpec"
NAME_CONFLICT = "NameConflict"
REJECTED = "Rejected"
ORPHANED_PODS = "OrphanedPods"
"""Waiting: pods of an earlier group run without their Job (a new group would double them)."""
PODS_NOT_CREATED = "PodsNotCreated"
WORKERS_CANNOT_START = "WorkersCannotStart"
"""Waiting: a worker's container waits on what will not come (an absent image, a missing
Secret): `launcher.core.never_starts`, the words `tflaunch wait` ends with (exit 5)."""
"""Waiting: the Job controller cannot create worker pods (a ResourceQuota, a webhook)."""
RETRYABLE_FAILURES: frozenset[str] = frozenset({INVALID_SPEC, NAME_CONFLICT, REJECTED})
"""Failed for these reasons is not final: nothing ran yet, and the operator tries again
when the spec is fixed (or the conflicting Job is gone)."""


def describe_preemptions(status: Status) -> str:
    """ "preempted 2 times (...), resumed at step 70" ("" when never preempted)."""
    if not status.preemptions:
        return ""
    times = "once" if status.preemptions == 1 else f"{status.preemptions} times"
    where = (
        f"resumed at step {status.resumed_at_step}"
        if status.resumed_at_step is not None
        else "resumed from the last checkpoint"
    )
    return f"preempted {times} (every worker saved first; not a restart), {where}"
