"""The operator's decisions: what a MultiWorkerJob and its children look like -> what to do.

Pure: `decide()` takes the observed state as plain dicts (the resource, its child Jobs and
their pods, the time) and returns a `Plan` (objects to create, Jobs to delete or patch, the
new status, the events to post). The kopf handlers in `launcher.operator` only observe, call
`decide()` and carry the plan out through `launcher.cluster`, so every rule below is testable
without a cluster, and a reconcile can run any number of times with the same outcome.

Why the rules are what they are:

* MultiWorkerMirroredStrategy cannot continue with a missing peer, so one failed worker
  means a whole-group restart: every Job is deleted (foreground, so old pods are gone
  before new ones start) and recreated; the trainer resumes from its checkpoint. The child
  Jobs get backoffLimit 0 so that Kubernetes does not retry single pods behind our back.
  spec.backoffLimit is the group-restart budget, as it is for `tflaunch local`.
* Exit code `contract.EXIT_CONFIG_ERROR` means retrying cannot help: Failed at once.
* A Job's pod template is immutable. A spec edit is applied (by recreating the Jobs) only
  while the job is suspended; otherwise it is reported and left alone.
* spec.suspend is propagated when it changes, not on every reconcile, so that Kueue can
  suspend and admit the Jobs itself.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from launcher import crd
from launcher.core import contract, labels, names, render
from launcher.core import spec as spec_model
from launcher.core.errors import SpecError
from launcher.crd import Condition, Phase, Status

K8sObject = dict[str, Any]

FINISHED_PHASES: frozenset[str] = frozenset({"Succeeded", "Failed"})
INVALID_SPEC = "InvalidSpec"
NAME_CONFLICT = "NameConflict"
REJECTED = "Rejected"
RETRYABLE_FAILURES: frozenset[str] = frozenset({INVALID_SPEC, NAME_CONFLICT, REJECTED})
"""Failed for these reasons is not final: nothing ran yet, and the operator tries again
when the spec is fixed (or the conflicting Job is gone)."""
CONFLICT_RETRY_SECONDS = 30.0
RESTART_POLL_SECONDS = 5.0
"""How soon to look again while old Jobs are still terminating (their deletion events
usually come first)."""
LOG_TAIL_LINES = 200
"""How much of the chief's log to read for its result line (it is printed last)."""


@dataclasses.dataclass(frozen=True)
class Observed:
    """One MultiWorkerJob and what it owns, as read from the API."""

    resource: Mapping[str, Any]
    """The MultiWorkerJob: metadata (name, namespace, uid, generation), spec, status."""
    jobs: Sequence[Mapping[str, Any]] = ()
    """Its child Jobs (owned by it), including ones being deleted."""
    pods: Sequence[Mapping[str, Any]] = ()
    """The pods of those Jobs."""
    now: datetime.datetime = dataclasses.field(
        default_factory=lambda: datetime.datetime.now(datetime.timezone.utc)
    )
    chief_log: str | None = None
    """The tail of the chief pod's log, when `chief_log_wanted()` asked for it."""


@dataclasses.dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the MultiWorkerJob."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to do, in this order: status, deletions, patches, creations, the resource."""

    status: Status | None = None
    """The new status; None when it did not change (so nothing is written)."""
    delete_jobs: tuple[str, ...] = ()
    """Job names to delete with foreground propagation (their pods go first)."""
    patch_jobs: tuple[tuple[str, K8sObject], ...] = ()
    """(Job name, merge patch)."""
    create: tuple[K8sObject, ...] = ()
    """Objects to create; an existing one (409) is fine."""
    delete_resource: bool = False
    """ttlSecondsAfterFinished has passed: delete the MultiWorkerJob (its children cascade)."""
    events: tuple[Event, ...] = ()
    requeue_after: float | None = None
    """Look again after this many seconds even if nothing happens (TTL, slow deletions)."""


# --- Reading plain Kubernetes objects --------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def _terminating(obj: Mapping[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The object's status condition `kind` when it is True."""
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


def _job_failed(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    # FailureTarget (Kubernetes >= 1.31) comes before Failed, while pods still terminate.
    return _condition(job, "Failed") or _condition(job, "FailureTarget")


def _job_complete(job: Mapping[str, Any]) -> bool:
    return _condition(job, "Complete") is not None


def _job_suspended(job: Mapping[str, Any]) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def _annotation(obj: Mapping[str, Any], key: str) -> str | None:
    value = (_meta(obj).get("annotations") or {}).get(key)
    return None if value is None else str(value)


def _parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def format_time(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC, seconds precision, as Kubernetes writes it."""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class WorkerExit:
    """How one worker pod ended (its trainer container's terminated state)."""

    worker: int | None
    pod: str
    exit_code: int | None
    reason: str
    message: str

    def describe(self) -> str:
        who = f"worker {self.worker}" if self.worker is not None else "a worker"
        how = f"exited with code {self.exit_code}" if self.exit_code is not None else "failed"
        detail = self.message.strip().splitlines()[-1] if self.message.strip() else self.reason
        return f"{who} (pod {self.pod}) {how}" + (f": {detail}" if detail else "")


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The trainer container's terminated state (current, else the last one)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        if status.get("name") != "trainer":
            continue
        for key in ("state", "lastState"):
            terminated = (status.get(key) or {}).get("terminated")
            if terminated:
                return dict(terminated)
    return None


def _worker_index(pod: Mapping[str, Any]) -> int | None:
    meta = _meta(pod)
    return labels.worker_index_of(meta.get("labels") or {}, meta.get("annotations") or {})


def failed_workers(pods: Iterable[Mapping[str, Any]]) -> list[WorkerExit]:
    """Workers whose trainer exited non-zero (or whose pod failed), by worker index."""
    exits = []
    for pod in pods:
        terminated = _terminated(pod)
        phase = (pod.get("status") or {}).get("phase")
        code = terminated.get("exitCode") if terminated else None
        if (code is None or code == 0) and phase != "Failed":
            continue
        exits.append(
            WorkerExit(
                worker=_worker_index(pod),
                pod=_name(pod),
                exit_code=code,
                reason=str(
                    (terminated or {}).get("reason")
                    or (pod.get("status") or {}).get("reason")
                    or ""
                ),
                message=str((terminated or {}).get("message") or ""),
            )
        )
    return sorted(exits, key=lambda e: (e.worker is None, e.worker or 0, e.pod))


def parse_result(text: str | None) -> dict[str, Any] | None:
    """The chief's result from its last `TFLAUNCH_RESULT {json}` line, if there is one."""
    for line in reversed((text or "").splitlines()):
        at = line.find(contract.RESULT_LINE_PREFIX)
        if at < 0:
            continue
        try:
            value = json.loads(line[at + len(contract.RESULT_LINE_PREFIX) :])
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _chief_pod(pods: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Worker 0's pod, preferring one that succeeded."""
    chiefs = [p for p in pods if _worker_index(p) == 0]
    chiefs.sort(key=lambda p: (p.get("status") or {}).get("phase") != "Succeeded")
    return chiefs[0] if chiefs else None


def _owned_by(obj: Mapping[str, Any], uids: Iterable[str]) -> bool:
    wanted = set(uids)
    return any(ref.get("uid") in wanted for ref in _meta(obj).get("ownerReferences") or ())


def owned(observed: Observed) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """The Jobs this resource controls, and those Jobs' pods (by ownerReference uid).

    Label selectors alone are not enough: a Job submitted with `tflaunch submit` under the
    same name carries the same labels, and must be neither restarted nor counted.
    """
    uid = str(_meta(observed.resource).get("uid") or "")
    jobs = [j for j in observed.jobs if uid and _owned_by(j, [uid])]
    job_uids = [str(_meta(j).get("uid")) for j in jobs if _meta(j).get("uid")]
    pods = [p for p in observed.pods if _owned_by(p, job_uids)]
    return jobs, pods


def chief_log_wanted(observed: Observed) -> str | None:
    """The chief pod whose log holds the result, when the job just succeeded; else None.

    The result is read once, on the transition to Succeeded, and only if the chief's
    termination message does not already carry it.
    """
    old = crd.status_from_document(observed.resource.get("status"))
    if _finished(old):
        return None
    jobs, pods = owned(observed)
    live = [j for j in jobs if not _terminating(j)]
    if not live or not all(_job_complete(j) for j in live):
        return None
    chief = _chief_pod(pods)
    if chief is None or parse_result((_terminated(chief) or {}).get("message")) is not None:
        return None
    return _name(chief)


# --- The children the operator creates ------------------------------------------------------


def trimmed(resource: Mapping[str, Any]) -> dict[str, Any]:
    """The resource as a spec file: apiVersion, kind, metadata.name/namespace, spec."""
    meta = _meta(resource)
    return {
        "apiVersion": resource.get("apiVersion"),
        "kind": resource.get("kind"),
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace", "default")},
        "spec": copy.deepcopy(resource.get("spec")),
    }


def spec_hash(job: spec_model.MultiWorkerJob) -> str:
    """Identifies what the child Jobs were rendered from, minus what applies without them.

    suspend, backoffLimit and ttlSecondsAfterFinished are the operator's own settings: they
    take effect at once, without recreating the Jobs.
    """
    relevant = dataclasses.replace(
        job.spec, suspend=False, backoff_limit=0, ttl_seconds_after_finished=None
    )
    document = {"metadata": crd.document_of(job.metadata), "spec": crd.document_of(relevant)}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def owner_reference(resource: Mapping[str, Any]) -> dict[str, Any]:
    """Makes the MultiWorkerJob own a child: `kubectl delete mwj` deletes it too."""
    return {
        "apiVersion": spec_model.API_VERSION,
        "kind": spec_model.KIND,
        "name": _name(resource),
        "uid": str(_meta(resource).get("uid", "")),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def children(
    job: spec_model.MultiWorkerJob,
    resource: Mapping[str, Any],
    restarts: int,
    deadline_seconds: int | None,
) -> list[K8sObject]:
    """`render.render(job)`, adapted to a group restarted by the operator.

    Each object gets an ownerReference to the MultiWorkerJob. Each Job gets backoffLimit 0
    (the operator restarts the whole group; the podFailurePolicy stays, so a config error
    still fails the Job at once), no TTL (the operator's TTL deletes the resource and with
    it everything), the remaining deadline, and the restart count in $TFLAUNCH_RESTARTS.
    """
    objects = render.render(job)
    owner = owner_reference(resource)
    for obj in objects:
        obj["metadata"]["ownerReferences"] = [owner]
        if obj["kind"] != "Job":
            continue
        job_spec = obj["spec"]
        job_spec["backoffLimit"] = 0
        job_spec.pop("ttlSecondsAfterFinished", None)
        job_spec.pop("activeDeadlineSeconds", None)
        if deadline_seconds is not None:
            job_spec["activeDeadlineSeconds"] = deadline_seconds
        obj["metadata"].setdefault("annotations", {}).update(
            {
                labels.SPEC_HASH: spec_hash(job),
                labels.SUSPEND_REQUESTED: _bool_text(job.spec.suspend),
                labels.GROUP_RESTARTS: str(restarts),
            }
        )
        for container in job_spec["template"]["spec"]["containers"]:
            env = [e for e in container.get("env", []) if e.get("name") != contract.ENV_RESTARTS]
            env.append({"name": contract.ENV_RESTARTS, "value": str(restarts)})
            container["env"] = env
    return objects


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def _remaining_deadline(
    job: spec_model.MultiWorkerJob, status: Status, now: datetime.datetime
) -> int | None:
    """Seconds left of spec.activeDeadlineSeconds, counted from status.startTime."""
    limit = job.spec.active_deadline_seconds
    if limit is None:
        return None
    started = _parse_time(status.start_time)
    used = 0 if started is None else int((now - started).total_seconds())
    return limit - used


# --- Status bookkeeping ---------------------------------------------------------------------

_EXCLUSIVE = ("Running", "Restarting", "Suspended", "Succeeded", "Failed")


def _with_phase(
    status: Status, phase: Phase, reason: str, message: str, now: datetime.datetime
) -> Status:
    """`status` in `phase`, with its conditions kept consistent.

    The condition named like the phase is True and carries the reason and message; the other
    phase conditions present become False. A lastTransitionTime changes only when its
    condition's status does. Created is a fact, not a phase: True from the first creation of
    the children on.
    """
    truth = {kind: kind == phase for kind in _EXCLUSIVE}
    truth["Created"] = _has_condition(status, "Created") or phase != "Failed"
    previous = {c.type: c for c in status.conditions}
    stamp = format_time(now)
    conditions = []
    for kind in crd.CONDITION_TYPES:
        value: Literal["True", "False"] = "True" if truth[kind] else "False"
        old = previous.get(kind)
        if old is None and value == "False":
            continue
        changed = old is None or old.status != value
        if kind == "Created":  # a fact, not a phase: set once, never updated
            why, what = (old.reason, old.message) if old else ("JobsCreated", "")
        elif kind == phase:
            why, what = reason, message
        elif old is not None and not changed:
            why, what = old.reason, old.message
        else:
            why, what = reason, f"now {phase}"
        since = stamp if changed or old is None else old.last_transition_time
        conditions.append(Condition(kind, value, why, what, since))
    return dataclasses.replace(
        status, phase=phase, reason=reason, message=message, conditions=tuple(conditions)
    )


def _has_condition(status: Status, kind: str) -> bool:
    return any(c.type == kind and c.status == "True" for c in status.conditions)


def _workers(status: Status, ready: int, total: int) -> Status:
    return dataclasses.replace(
        status, workers=f"{ready}/{total}", workers_ready=ready, workers_total=total
    )


def _finished(status: Status) -> bool:
    return status.phase in FINISHED_PHASES and not (
        status.phase == "Failed" and status.reason in RETRYABLE_FAILURES
    )


def _transition_events(old: Status, new: Status) -> tuple[Event, ...]:
    if new.phase == old.phase or new.phase is None or new.phase == "Created":
        return ()  # the creation itself is announced by its own event
    warning = new.phase in ("Failed", "Restarting")
    return (Event("Warning" if warning else "Normal", new.phase, new.message or new.reason),)


# --- The decision ---------------------------------------------------------------------------


def decide(observed: Observed) -> Plan:
    """Everything the operator should do for one MultiWorkerJob, given what it observed."""
    resource = observed.resource
    if _terminating(resource):
        return Plan()  # the garbage collector deletes the children
    old = crd.status_from_document(resource.get("status"))
    if _finished(old):
        return _after_finish(observed, old)
    if old.reason == REJECTED and old.observed_generation == _meta(resource).get("generation"):
        return Plan()  # the API server refused this spec's objects: wait for an edit
    jobs, pods = owned(observed)
    try:
        job = spec_model.job_from_document(trimmed(resource))
    except SpecError as error:
        return _invalid_spec(observed, old, jobs, error)
    return _Reconcile(observed, job, old, jobs, pods).run()


def rejected(observed: Observed, error: str) -> Plan:
    """The API server refused to create a child (422): Failed until the spec is edited.

    The spec passed `spec.validate`, but something only the server checks did not (a
    toleration's fields, an admission webhook); creating it again would fail the same way.
    """
    old = crd.status_from_document(observed.resource.get("status"))
    message = f"{error}; fix the spec (kubectl edit mwj {_name(observed.resource)})"
    status = _with_phase(old, "Failed", REJECTED, message, observed.now)
    status = dataclasses.replace(
        status, observed_generation=_meta(observed.resource).get("generation")
    )
    return Plan(status=status, events=(Event("Warning", REJECTED, message),))


def _after_finish(observed: Observed, old: Status) -> Plan:
    """Succeeded or Failed: nothing runs any more; only the TTL is left to apply."""
    ttl = _ttl(observed.resource)
    completed = _parse_time(old.completion_time)
    if ttl is None or completed is None:
        return Plan()
    left = (completed - observed.now).total_seconds() + ttl
    if left > 0:
        return Plan(requeue_after=left)
    return Plan(
        delete_resource=True,
        events=(
            Event("Normal", "Expired", f"deleting: finished more than {ttl}s ago "
                  "(spec.ttlSecondsAfterFinished)"),
        ),
    )  # fmt: skip


def _ttl(resource: Mapping[str, Any]) -> int | None:
    try:
        return spec_model.job_from_document(trimmed(resource)).spec.ttl_seconds_after_finished
    except SpecError:
        raw = (resource.get("spec") or {}).get("ttlSecondsAfterFinished")
        return raw if isinstance(raw, int) and not isinstance(raw, bool) else None


def _invalid_spec(
    observed: Observed, old: Status, jobs: Sequence[Mapping[str, Any]], error: SpecError
) -> Plan:
    generation = _meta(observed.resource).get("generation")
    if any(not _terminating(j) for j in jobs):
        # Running with an edit that does not validate: keep running what was valid.
        if generation == old.observed_generation:
            return Plan()
        return Plan(
            status=dataclasses.replace(old, observed_generation=generation),
            events=(
                Event("Warning", "SpecChangeRejected",
                      f"the edited spec is invalid and was not applied: {error}"),
            ),
        )  # fmt: skip
    message = (
        f"{error}; fix the spec (kubectl edit mwj {_name(observed.resource)}) and the "
        "operator tries again"
    )
    status = _with_phase(old, "Failed", INVALID_SPEC, message, observed.now)
    status = dataclasses.replace(status, observed_generation=generation)
    if status == old:
        return Plan()
    return Plan(status=status, events=(Event("Warning", INVALID_SPEC, message),))


class _Reconcile:
    """One decision for a valid, unfinished MultiWorkerJob (a class only to share state)."""

    def __init__(
        self,
        observed: Observed,
        job: spec_model.MultiWorkerJob,
        old: Status,
        jobs: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
    ) -> None:
        self.observed = observed
        self.job = job
        self.old = old
        self.now = observed.now
        generation = _meta(observed.resource).get("generation")
        self.status = dataclasses.replace(old, observed_generation=generation)
        self.jobs = list(jobs)
        self.live = [j for j in jobs if not _terminating(j)]
        live_uids = [str(_meta(j).get("uid")) for j in self.live]
        self.pods = [p for p in pods if _owned_by(p, live_uids)]
        self.workers = job.spec.workers
        self.hash = spec_hash(job)
        self.job_names = (
            [names.indexed_job_name(job.name)]
            if job.spec.layout == "indexed"
            else [names.per_worker_job_name(job.name, i) for i in range(self.workers)]
        )

    def run(self) -> Plan:
        if self.old.phase == "Restarting":
            return self._restarting()
        if self.live:
            outcome = self._outcome()
            if outcome is not None:
                return outcome
        if any(_terminating(j) for j in self.jobs):
            return self._waiting_for_deletion()
        if not self.live:
            foreign = self._foreign_jobs()
            if foreign:
                return self._name_conflict(foreign)
            return self._create(restarted=False)
        stale = any(_annotation(j, labels.SPEC_HASH) != self.hash for j in self.live)
        if stale and all(_job_suspended(j) for j in self.live):
            return self._apply_spec_change()
        missing = set(self.job_names) - {_name(j) for j in self.live}
        if missing and not stale:
            return self._create(restarted=False)  # only the missing Jobs
        return self._steady(spec_change_pending=stale)

    # -- outcomes of a running group

    def _outcome(self) -> Plan | None:
        """Succeeded, Failed or Restarting, when the live Jobs say so."""
        exits = failed_workers(self.pods)
        failures = [(j, c) for j in self.live if (c := _job_failed(j)) is not None]
        config = [e for e in exits if e.exit_code == contract.EXIT_CONFIG_ERROR]
        if config or any(c.get("reason") == "PodFailurePolicy" for _, c in failures):
            what = config[0].describe() if config else _job_message(failures)
            return self._fail(
                "ConfigError",
                f"{what}; exit code {contract.EXIT_CONFIG_ERROR} is a configuration error "
                "that a restart cannot fix",
            )
        if any(c.get("reason") == "DeadlineExceeded" for _, c in failures):
            return self._fail(
                "DeadlineExceeded",
                "the job ran longer than spec.activeDeadlineSeconds "
                f"({self.job.spec.active_deadline_seconds}s)",
            )
        if failures:
            what = exits[0].describe() if exits else _job_message(failures)
            return self._restart_or_fail(what)
        if set(self.job_names) <= {_name(j) for j in self.live if _job_complete(j)}:
            return self._succeed()
        return None

    def _succeed(self) -> Plan:
        chief = _chief_pod(self.pods)
        result = parse_result((_terminated(chief) or {}).get("message")) if chief else None
        result = result or parse_result(self.observed.chief_log)
        message = f"all {self.workers} workers completed"
        if result is None:
            message += f"; no {contract.RESULT_LINE_PREFIX.strip()} line in the chief's log"
        elif isinstance(result.get("test_accuracy"), int | float):
            message += f"; test accuracy {result['test_accuracy']:.4f}"
        status = _with_phase(self.status, "Succeeded", "Completed", message, self.now)
        status = dataclasses.replace(
            _workers(status, 0, self.workers),
            result=result or {},
            completion_time=format_time(self.now),
            start_time=self.status.start_time or format_time(self.now),
        )
        return Plan(status=status, events=_transition_events(self.old, status))

    def _fail(self, reason: str, message: str) -> Plan:
        """Failed for good: stop what still runs (keep the failed Jobs for their logs)."""
        status = _with_phase(self.status, "Failed", reason, message, self.now)
        status = dataclasses.replace(
            _workers(status, 0, self.workers), completion_time=format_time(self.now)
        )
        running = tuple(
            _name(j) for j in self.live if _job_failed(j) is None and not _job_complete(j)
        )
        return Plan(status=status, delete_jobs=running, events=_transition_events(self.old, status))

    def _restart_or_fail(self, what: str) -> Plan:
        limit = self.job.spec.backoff_limit
        if self.status.restarts >= limit:
            return self._fail(
                "BackoffLimitExceeded",
                f"{what}; the group was restarted {self.status.restarts} times already "
                f"(spec.backoffLimit: {limit})",
            )
        restarts = self.status.restarts + 1
        message = (
            f"{what}; restarting all {self.workers} workers from the last checkpoint "
            f"(restart {restarts} of {limit})"
        )
        status = _with_phase(self.status, "Restarting", "WorkerFailed", message, self.now)
        status = dataclasses.replace(_workers(status, 0, self.workers), restarts=restarts)
        return Plan(
            status=status,
            delete_jobs=tuple(_name(j) for j in self.live),
            events=_transition_events(self.old, status),
            requeue_after=RESTART_POLL_SECONDS,
        )

    # -- restarts and spec changes: delete, wait until gone, create

    def _restarting(self) -> Plan:
        if self.jobs:
            return self._waiting_for_deletion()
        return self._create(restarted=True)

    def _waiting_for_deletion(self) -> Plan:
        """Old Jobs still exist: (re)issue their deletion and look again soon."""
        return Plan(
            status=None if self.status == self.old else self.status,
            delete_jobs=tuple(_name(j) for j in self.live),
            requeue_after=RESTART_POLL_SECONDS,
        )

    def _apply_spec_change(self) -> Plan:
        message = (
            f"applying the edited spec (generation {self.status.observed_generation}): "
            "recreating the suspended Jobs"
        )
        status = _with_phase(self.status, "Suspended", "SpecChanged", message, self.now)
        return Plan(
            status=None if status == self.old else status,
            delete_jobs=tuple(_name(j) for j in self.live),
            events=(Event("Normal", "SpecChanged", message),),
            requeue_after=RESTART_POLL_SECONDS,
        )

    def _foreign_jobs(self) -> list[str]:
        """Jobs with our names that this resource does not own (e.g. `tflaunch submit`)."""
        ours = {_name(j) for j in self.jobs}
        return sorted(
            _name(j)
            for j in self.observed.jobs
            if _name(j) in self.job_names and _name(j) not in ours
        )

    def _name_conflict(self, foreign: list[str]) -> Plan:
        message = (
            f"Job {', '.join(foreign)} already exists and does not belong to this "
            "MultiWorkerJob (was the job also submitted with `tflaunch submit`?); delete "
            "it, or rename this MultiWorkerJob"
        )
        status = _with_phase(self.status, "Failed", NAME_CONFLICT, message, self.now)
        return Plan(
            status=None if status == self.old else status,
            events=() if status.message == self.old.message else (
                Event("Warning", NAME_CONFLICT, message),
            ),
            requeue_after=CONFLICT_RETRY_SECONDS,
        )  # fmt: skip

    def _create(self, restarted: bool) -> Plan:
        """Create what is missing: the Service, NetworkPolicy and the absent Jobs."""
        deadline = _remaining_deadline(self.job, self.status, self.now)
        if deadline is not None and deadline <= 0:
            return self._fail(
                "DeadlineExceeded",
                "no time left to (re)start the workers within spec.activeDeadlineSeconds "
                f"({self.job.spec.active_deadline_seconds}s)",
            )
        desired = children(self.job, self.observed.resource, self.status.restarts, deadline)
        existing = {_name(j) for j in self.live}
        create = tuple(o for o in desired if o["kind"] != "Job" or _name(o) not in existing)
        jobs = [_name(o) for o in create if o["kind"] == "Job"]
        if self.job.spec.suspend:
            phase: Phase = "Suspended"
            reason, message = "Suspended", "created suspended (spec.suspend: true)"
        else:
            phase, reason = "Created", "Restarted" if restarted else "Created"
            message = f"waiting for the workers: 0/{self.workers} ready"
        status = _workers(
            _with_phase(self.status, phase, reason, message, self.now), 0, self.workers
        )
        if restarted:
            event = Event(
                "Normal", "Restarted",
                f"recreated Job {', '.join(jobs)} after restart {self.status.restarts}",
            )  # fmt: skip
        else:
            event = Event(
                "Normal", "Created",
                f"created Job {', '.join(jobs)} for {self.workers} workers, with their "
                "Service and NetworkPolicy",
            )  # fmt: skip
        return Plan(
            status=None if status == self.old else status,
            create=create,
            events=(event, *_transition_events(self.old, status)),
        )

    # -- a group that exists and has not finished

    def _steady(self, spec_change_pending: bool) -> Plan:
        patches = self._suspend_patches()
        patched = {name for name, _ in patches}
        suspended = all(
            self.job.spec.suspend if _name(j) in patched else _job_suspended(j) for j in self.live
        )
        total = self.workers
        if spec_change_pending:  # the running group is still the one of the old spec
            total = sum(int((j.get("spec") or {}).get("completions") or 1) for j in self.live)
        ready = sum(int((j.get("status") or {}).get("ready") or 0) for j in self.live)
        ready = 0 if suspended else min(total, ready)
        phase: Phase
        if suspended and self.job.spec.suspend:
            phase, reason = "Suspended", "Suspended"
            message = "suspended (spec.suspend: true): the workers' pods are deleted"
        elif suspended:
            phase, reason = "Suspended", "Queued"
            message = "the Jobs are suspended by someone else, e.g. queued by Kueue"
        elif ready >= total:
            phase, reason = "Running", "AllWorkersReady"
            message = f"all {total} workers are ready"
        else:
            phase, reason = "Created", "WaitingForWorkers"
            message = f"waiting for the workers: {ready}/{total} ready"
        events: list[Event] = []
        if spec_change_pending and self.job.spec.suspend:
            message = f"{message}; the edited spec is applied once the Jobs are suspended"
        elif spec_change_pending:
            note = (
                "the spec was edited while the job runs and is not applied (a Job's pod "
                "template is immutable): set spec.suspend: true to apply it, or delete and "
                "re-create the MultiWorkerJob"
            )
            message = f"{message}; {note}"
            if self.old.observed_generation != self.status.observed_generation:
                events.append(Event("Warning", "SpecChangeRejected", note))
        if patches and self.old.phase == "Suspended" and not self.job.spec.suspend:
            events.append(Event("Normal", "Resumed", "resumed (spec.suspend: false)"))
        status = _workers(_with_phase(self.status, phase, reason, message, self.now), ready, total)
        if phase == "Running" and status.start_time is None:
            status = dataclasses.replace(status, start_time=format_time(self.now))
        events.extend(_transition_events(self.old, status))
        return Plan(
            status=None if status == self.old else status,
            patch_jobs=patches,
            events=tuple(events),
        )

    def _suspend_patches(self) -> tuple[tuple[str, K8sObject], ...]:
        """Propagate spec.suspend to the Jobs that have not seen its current value yet."""
        wanted = _bool_text(self.job.spec.suspend)
        return tuple(
            (
                _name(j),
                {
                    "metadata": {"annotations": {labels.SUSPEND_REQUESTED: wanted}},
                    "spec": {"suspend": self.job.spec.suspend},
                },
            )
            for j in self.live
            if _annotation(j, labels.SUSPEND_REQUESTED) != wanted
        )


def _job_message(failures: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> str:
    job, condition = failures[0]
    detail = condition.get("message") or condition.get("reason") or "failed"
    return f"Job {_name(job)} failed: {detail}"
