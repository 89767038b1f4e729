"""Label and annotation keys tflaunch sets and reads, each with why it exists."""

from __future__ import annotations

from collections.abc import Mapping

from launcher.api import rules

NAME = "app.kubernetes.io/name"
"""Always "tflaunch-worker": what runs in the pod."""
INSTANCE = "app.kubernetes.io/instance"
"""The job's name: tells one job's objects from another's."""
COMPONENT = "app.kubernetes.io/component"
"""Always "worker" on pods; the Service and NetworkPolicy get their own component."""
MANAGED_BY = "app.kubernetes.io/managed-by"
"""Always "tflaunch": `tflaunch list` and `delete` select on it."""
JOB_NAME = "tflaunch.dev/job-name"
"""The job's name; the Service's and NetworkPolicy's selectors use it."""
WORKER_INDEX = "tflaunch.dev/worker-index"
"""Worker index on pods of the per-worker layout (literal, known at render time)."""
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
"""Set by Kubernetes on pods of Indexed Jobs (annotation, and label since 1.28)."""
JOB_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
"""Set by Kubernetes on every pod of a Job (its selector, since 1.27): the Job's uid."""

RESERVED = frozenset({NAME, INSTANCE, COMPONENT, MANAGED_BY, JOB_NAME, WORKER_INDEX})
"""Keys users may not set in spec.labels: selectors and cleanup depend on them."""

MANAGED_BY_VALUE = "tflaunch"
APP_NAME = "tflaunch-worker"


def job_labels(job: str) -> dict[str, str]:
    """Labels on every object of a job; the selector for `delete` and `status`."""
    return {MANAGED_BY: MANAGED_BY_VALUE, INSTANCE: job, JOB_NAME: job}


def worker_selector(job: str) -> dict[str, str]:
    """Selects exactly the worker pods of one job (Service and NetworkPolicy selectors)."""
    return {JOB_NAME: job, COMPONENT: "worker"}


def job_selector_string(job: str) -> str:
    """`job_labels` as a Kubernetes label selector string."""
    return ",".join(f"{k}={v}" for k, v in sorted(job_labels(job).items()))


def managed_selector_string() -> str:
    return f"{MANAGED_BY}={MANAGED_BY_VALUE}"


def worker_index_of(labels: Mapping[str, str], annotations: Mapping[str, str]) -> int | None:
    """A worker pod's index, whichever layout created it; None when it has none."""
    for source, key in (
        (labels, WORKER_INDEX),
        (annotations, COMPLETION_INDEX),
        (labels, COMPLETION_INDEX),
    ):
        index = parse_index(source.get(key))
        if index is not None:
            return index
    return None


def parse_index(value: object) -> int | None:
    """A worker index read from the cluster (a label or annotation anyone who can create a
    Job or pod may write): ASCII digits below `rules.MAX_WORKERS`, else None."""
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        return None
    if len(value) > len(str(rules.MAX_WORKERS)) or int(value) >= rules.MAX_WORKERS:
        return None
    return int(value)


# --- operator: annotations on the child Jobs of a MultiWorkerJob ---------------------------

SPEC_HASH = "tflaunch.dev/spec-hash"
"""Hash of the MultiWorkerJob spec a Job was rendered from: the operator tells an edited spec
from the running one by it (a Job's pod template is immutable)."""
SUCCESS_POLICY = "tflaunch.dev/success-policy"
"""On every Job of a job whose spec.successPolicy is chief: the Jobs tell every reader (status,
wait, the operator) that worker 0's success is the group's (`reading.group_succeeded`)."""
SUSPEND_REQUESTED = "tflaunch.dev/suspend-requested"
"""spec.suspend as tflaunch (the operator, or `tflaunch submit`) last applied it to the Job.
Both act only when spec.suspend changes against it, so Kueue (or a person) may suspend and
resume the Job itself without a tug of war."""
GROUP_RESTARTS = "tflaunch.dev/group-restarts"
"""How many whole-group restarts came before this Job (also the pods' $TFLAUNCH_RESTARTS)."""

BACKOFF_LIMIT = "tflaunch.dev/backoff-limit"
"""On a Job whose backoffLimit is not spec.backoffLimit itself: the arithmetic, in words
(the indexed Job counts pod failures, and one group failure fails every worker's pod)."""

STOPPED = "tflaunch.dev/stopped"
"""On a plain job's Jobs that `tflaunch wait` failed on purpose (their backoffLimit set to 0):
`Reason: why`, e.g. the same worker OOM-killed again (`launcher.core.oom`); `status` says it
instead of the Job controller's BackoffLimitExceeded."""

CHECKPOINT_RUN = "tflaunch.dev/checkpoint-run"
"""The run whose checkpoints a Job's workers write (spec.checkpoint.run, or the id submit
chose): an unchanged resubmit keeps it, so the running group's path stays the same."""

# --- release -------------------------------------------------------------------------------

RELEASE_VERSION = "tflaunch.dev/version"
"""Annotation on the CRD: the tflaunch release (pyproject's version) that generated it, the
same version as the operator image that reads it."""
