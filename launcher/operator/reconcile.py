"""The operator's decisions: what a MultiWorkerJob and its children look like -> what to do.

Pure: `decide()` takes the observed state as plain dicts (the resource, its child Jobs and
their pods, the time) and returns a `Plan` (objects to create, Jobs to delete or patch, the
new status, the events to post). The kopf handlers in `launcher.operator.controller` only
observe, call `decide()` and carry the plan out through `launcher.cluster`, so every rule
below is testable without a cluster, and a reconcile can run any number of times with the
same outcome.

One decision runs in named steps: observe (`launcher.operator.observe`: the `Group`), then
decide restart (`launcher.operator.outcome`: succeeded, failed, or restart it all),
plan writes (create what is missing, recreate for a spec change, refuse a name conflict),
and decide status (a group that runs, waits for its workers or is suspended).

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

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from launcher.api.status import describe_preemptions
from launcher.core import (
    admission,
    group_status,
    labels,
    load,
    never_starts,
    reading,
    script_lint,
)
from launcher.core.errors import SpecError
from launcher.core.timestamps import format_time, parse_time
from launcher.operator import crd, in_place, outcome, preemptions
from launcher.operator import progress as progress_status
from launcher.operator.children import bool_text, children, remaining_deadline, trimmed
from launcher.operator.conditions import (
    INVALID_SPEC,
    NAME_CONFLICT,
    ORPHANED_PODS,
    PODS_NOT_CREATED,
    REJECTED,
    WORKERS_CANNOT_START,
    finished,
    with_phase,
    with_workers,
)
from launcher.operator.crd import Phase, Status
from launcher.operator.objects import (
    K8sObject,
    annotation_of,
    meta_of,
    name_of,
    suspend_set,
    terminating,
)
from launcher.operator.observe import Group, Observed, observe, orphaned_pods, owned
from launcher.operator.plan import (
    CONFLICT_RETRY_SECONDS,
    RESTART_POLL_SECONDS,
    STALL_POLL_SECONDS,
    transition_events,
)
from launcher.operator.plan import Event as Event
from launcher.operator.plan import Plan as Plan

# --- The decision ---------------------------------------------------------------------------


def decide(observed: Observed) -> Plan:
    """Everything the operator should do for one MultiWorkerJob, given what it observed."""
    resource = observed.resource
    if terminating(resource):
        return Plan()  # the garbage collector deletes the children
    old = crd.status_from_document(resource.get("status"))
    if finished(old):
        return _after_finish(observed, old)
    if old.reason == REJECTED and old.observed_generation == meta_of(resource).get("generation"):
        return Plan()  # the API server refused this spec's objects: wait for an edit
    jobs, pods = owned(observed)
    try:
        job = load.job_from_document(trimmed(resource))
    except SpecError as error:
        return _invalid_spec(observed, old, jobs, error)
    # Restarts in place first: they spend the budget the decision reads (status.restarts).
    counted, restarted = in_place.counted(old, observed.chief_log)
    plan = _run(observe(observed, job, counted, jobs, pods))
    unchanged = counted if counted != old else None  # plan.status None: counted as it is
    status, requeue = progress_status.refreshed(
        plan.status or unchanged, counted, observed.chief_log, observed.now, plan.requeue_after
    )
    events = (*restarted, *plan.events)
    return dataclasses.replace(plan, status=status, requeue_after=requeue, events=events)


def rejected(observed: Observed, error: str) -> Plan:
    """The API server refused to create a child (422): Failed until the spec is edited.

    The spec passed `load.validate`, but something only the server checks did not (a
    toleration's fields, an admission webhook); creating it again would fail the same way.
    """
    old = crd.status_from_document(observed.resource.get("status"))
    message = f"{error}; fix the spec (kubectl edit mwj {name_of(observed.resource)})"
    status = with_phase(old, "Failed", REJECTED, message, observed.now)
    status = dataclasses.replace(
        status, observed_generation=meta_of(observed.resource).get("generation")
    )
    return Plan(status=status, events=(Event("Warning", REJECTED, message),))


def name_taken(observed: Observed, taken: str) -> Plan:
    """Creating a child answered 409 and the object there is someone else's (`taken`, e.g.
    `Service mnist`): Failed with NameConflict and a Warning event, never adopted and no group
    restart. Retried every CONFLICT_RETRY_SECONDS, so the job starts once it is gone."""
    old = crd.status_from_document(observed.resource.get("status"))
    message = (
        f"{taken} already exists and does not belong to this MultiWorkerJob (its workers "
        f"would not find each other); delete it, or rename this MultiWorkerJob"
    )
    status = with_phase(old, "Failed", NAME_CONFLICT, message, observed.now)
    repeated = old.reason == NAME_CONFLICT and old.message == message
    return Plan(
        status=None if status == old else status,
        events=() if repeated else (Event("Warning", NAME_CONFLICT, message),),
        requeue_after=CONFLICT_RETRY_SECONDS,
    )


def _after_finish(observed: Observed, old: Status) -> Plan:
    """Succeeded or Failed: nothing runs any more; only the TTL is left to apply."""
    ttl = _ttl(observed.resource)
    completed = parse_time(old.completion_time)
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
        return load.job_from_document(trimmed(resource)).spec.ttl_seconds_after_finished
    except SpecError:
        raw = (resource.get("spec") or {}).get("ttlSecondsAfterFinished")
        return raw if isinstance(raw, int) and not isinstance(raw, bool) else None


def _invalid_spec(
    observed: Observed, old: Status, jobs: Sequence[Mapping[str, Any]], error: SpecError
) -> Plan:
    generation = meta_of(observed.resource).get("generation")
    if any(not terminating(j) for j in jobs):
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
        f"{error}; fix the spec (kubectl edit mwj {name_of(observed.resource)}) and the "
        "operator tries again"
    )
    status = with_phase(old, "Failed", INVALID_SPEC, message, observed.now)
    status = dataclasses.replace(status, observed_generation=generation)
    if status == old:
        return Plan()
    return Plan(status=status, events=(Event("Warning", INVALID_SPEC, message),))


# --- The steps of one decision, after step 1 (`observe`) -------------------------------------


def _run(g: Group) -> Plan:
    """Record the preemptions the Jobs rode out (no restart), then steps 2 to 4."""
    status = preemptions.record(g.status, g.pods, g.job.spec.termination_grace_period_seconds)
    recorded = status != g.status
    plan = _run_group(dataclasses.replace(g, status=status) if recorded else g)
    events = (Event("Normal", "Preempted", describe_preemptions(status)),) if recorded else ()
    new = preemptions.said(plan.status, g.old)
    return dataclasses.replace(plan, status=new, events=(*events, *plan.events))


def _run_group(g: Group) -> Plan:
    """Steps 2 to 4 for a valid, unfinished MultiWorkerJob."""
    if g.old.phase == "Restarting":
        return _restarting(g)
    if g.live:
        result = outcome.outcome(g)
        if result is not None:
            return result
    if any(terminating(j) for j in g.jobs):
        return _waiting_for_deletion(g)
    if not g.live:
        foreign = _foreign_jobs(g)
        if foreign:
            return _name_conflict(g, foreign)
        return _create(g, restarted=False)
    stale = any(annotation_of(j, labels.SPEC_HASH) != g.hash for j in g.live)
    if stale and all(suspend_set(j) for j in g.live):
        return _apply_spec_change(g)
    missing = set(g.job_names) - {name_of(j) for j in g.live}
    if missing and not stale:
        return _create(g, restarted=False)  # only the missing Jobs
    return _restore(g, _steady(g, spec_change_pending=stale))


# --- Step 3, plan writes: restarts and spec changes (delete, wait until gone, create) ---------


def _restarting(g: Group) -> Plan:
    if g.jobs:
        return _waiting_for_deletion(g)
    return _create(g, restarted=True)


def _waiting_for_deletion(g: Group) -> Plan:
    """Old Jobs still exist: (re)issue their deletion and look again soon."""
    return Plan(
        status=None if g.status == g.old else g.status,
        delete_jobs=tuple(name_of(j) for j in g.live),
        requeue_after=RESTART_POLL_SECONDS,
    )


def _apply_spec_change(g: Group) -> Plan:
    message = (
        f"applying the edited spec (generation {g.status.observed_generation}): "
        "recreating the suspended Jobs"
    )
    status = with_phase(g.status, "Suspended", "SpecChanged", message, g.now)
    return Plan(
        status=None if status == g.old else status,
        delete_jobs=tuple(name_of(j) for j in g.live),
        events=(Event("Normal", "SpecChanged", message),),
        requeue_after=RESTART_POLL_SECONDS,
    )


def _foreign_jobs(g: Group) -> list[str]:
    """Jobs with our names that this resource does not own (e.g. `tflaunch submit`)."""
    ours = {name_of(j) for j in g.jobs}
    return sorted(
        name_of(j) for j in g.observed.jobs if name_of(j) in g.job_names and name_of(j) not in ours
    )


def _name_conflict(g: Group, foreign: list[str]) -> Plan:
    message = (
        f"Job {', '.join(foreign)} already exists and does not belong to this "
        "MultiWorkerJob (was the job also submitted with `tflaunch submit`?); delete "
        "it, or rename this MultiWorkerJob"
    )
    status = with_phase(g.status, "Failed", NAME_CONFLICT, message, g.now)
    return Plan(
        status=None if status == g.old else status,
        events=() if status.message == g.old.message else (
            Event("Warning", NAME_CONFLICT, message),
        ),
        requeue_after=CONFLICT_RETRY_SECONDS,
    )  # fmt: skip


def _create(g: Group, restarted: bool) -> Plan:
    """Create what is missing: the Service, NetworkPolicy and the absent Jobs; not while
    pods of an earlier group run without their Job (`_orphans_in_the_way`), and not what the
    operator's allowlist refuses (`launcher.operator.tenancy`: the pods would be created with
    the operator's rights, not the author's). A group that runs keeps running."""
    try:
        g.observed.policy.check(g.job)
    except SpecError as error:
        return _invalid_spec(g.observed, g.old, g.jobs, error)
    orphans = orphaned_pods(g.observed)
    if orphans:
        return _orphans_in_the_way(g, orphans)
    deadline = remaining_deadline(g.job, g.status, g.now)
    if deadline is not None and deadline <= 0:
        return outcome.fail(
            g,
            "DeadlineExceeded",
            "no time left to (re)start the workers within spec.activeDeadlineSeconds "
            f"({g.job.spec.active_deadline_seconds}s)",
        )
    desired = children(g.job, g.observed.resource, g.status.restarts, deadline)
    existing = {name_of(j) for j in g.live}
    create = tuple(o for o in desired if o["kind"] != "Job" or name_of(o) not in existing)
    jobs = [name_of(o) for o in create if o["kind"] == "Job"]
    if g.job.spec.suspend:
        phase: Phase = "Suspended"
        reason, message = "Suspended", "created suspended (spec.suspend: true)"
    else:
        phase, reason = "Created", "Restarted" if restarted else "Created"
        message = f"waiting for the workers: 0/{g.workers} ready"
    status = with_workers(with_phase(g.status, phase, reason, message, g.now), 0, g.workers)
    if restarted:
        event = Event(
            "Normal", "Restarted",
            f"recreated Job {', '.join(jobs)} after restart {g.status.restarts}",
        )  # fmt: skip
    else:
        event = Event(
            "Normal", "Created",
            f"created Job {', '.join(jobs)} for {g.workers} workers, with their "
            "Service and NetworkPolicy",
        )  # fmt: skip
    return Plan(
        status=None if status == g.old else status,
        create=create,
        events=(event, *_program_warnings(g, restarted), *transition_events(g.old, status)),
    )


PROGRAM_WARNING = "ProgramWarning"


def _program_warnings(g: Group, restarted: bool) -> tuple[Event, ...]:
    """What `tflaunch submit` says of a spec.script program before it starts (a model every
    worker would train alone, standalone Keras, ...), said once, when the group is first
    created: `kubectl apply` of a MultiWorkerJob shows it in `kubectl describe`."""
    if restarted or g.job.spec.script is None:
        return ()
    return tuple(
        Event("Warning", PROGRAM_WARNING, warning)
        for warning in script_lint.warnings(g.job.spec.script, g.workers)
    )


RESTORED = "Restored"
RESTORED_KINDS = ("Service", "NetworkPolicy")
"""Children created again when they are deleted while the group runs: without the Service
the workers' names stop resolving; without the NetworkPolicy anyone may reach their gRPC."""


def _orphans_in_the_way(g: Group, orphans: Sequence[str]) -> Plan:
    """Pods of an earlier group that lost their Job (`kubectl delete job --cascade=orphan`)
    still run under the workers' hostnames: a second group beside them would give each
    worker name two pods (and the Service two addresses). Wait until they are gone."""
    shown = ", ".join(orphans[:3]) + (f" and {len(orphans) - 3} more" if len(orphans) > 3 else "")
    namespace = meta_of(g.observed.resource).get("namespace")
    message = (
        f"{len(orphans)} pod(s) of an earlier worker group still run without their Job "
        f"({shown}; e.g. after kubectl delete job --cascade=orphan): a second group beside "
        f"them would give each worker name two pods; delete them (kubectl delete pods -n "
        f"{namespace} -l {labels.JOB_NAME}={g.job.name}) and the operator starts the group"
    )
    status = with_phase(g.status, "Created", ORPHANED_PODS, message, g.now)
    status = with_workers(status, 0, g.workers)
    said = g.old.reason == ORPHANED_PODS and g.old.message == message
    return Plan(
        status=None if status == g.old else status,
        events=() if said else (Event("Warning", ORPHANED_PODS, message),),
        requeue_after=STALL_POLL_SECONDS,  # pods are not watched: look again
    )


def _restore(g: Group, plan: Plan) -> Plan:
    """`plan`, plus the Service or NetworkPolicy that someone deleted while the group runs
    (a Warning event says so). Only when the controller looked (`Observed.others`)."""
    found = g.observed.others
    if found is None:
        return plan
    have = {(str(o.get("kind")), name_of(o)) for o in found}
    desired = children(g.job, g.observed.resource, g.status.restarts, None)
    missing = tuple(
        o for o in desired if o["kind"] in RESTORED_KINDS and (o["kind"], name_of(o)) not in have
    )
    if not missing:
        return plan
    what = ", ".join(f"{o['kind']} {name_of(o)}" for o in missing)
    event = Event("Warning", RESTORED, f"{what} was deleted while the workers run: created again")
    return dataclasses.replace(plan, create=(*plan.create, *missing), events=(*plan.events, event))


# --- Step 4, decide status: a group that exists and has not finished ------------------------


def _steady(g: Group, spec_change_pending: bool) -> Plan:
    patches = _suspend_patches(g)
    patched = {name for name, _ in patches}
    suspended = all(g.job.spec.suspend if name_of(j) in patched else suspend_set(j) for j in g.live)
    total = g.workers
    if spec_change_pending:  # the running group is still the one of the old spec
        total = sum(int(reading.spec(j).get("completions") or 1) for j in g.live)
    ready = 0 if suspended else min(total, reading.ready_workers(g.live))
    phase: Phase
    if suspended and g.job.spec.suspend:
        phase, reason = "Suspended", "Suspended"
        message = "suspended (spec.suspend: true): the workers' pods are deleted"
    elif suspended:
        phase, reason = "Suspended", "Queued"
        message = admission.waiting(g.live, g.observed.workloads) or (
            "the Jobs are suspended by someone else, e.g. queued by Kueue"
        )
    else:
        phase, reason, message = group_status.readiness(ready, total)
    short = g.observed.blocked
    causes = {job: why for job, why in sorted(short.items()) if why}
    if phase == "Created" and causes:
        reason = PODS_NOT_CREATED
        message += "; " + "; ".join(
            f"Job {job} cannot create its pods: {why}" for job, why in causes.items()
        )
    stuck = never_starting(g.pods, g.observed.pod_warnings)
    if phase == "Created" and stuck and reason != PODS_NOT_CREATED:
        reason = WORKERS_CANNOT_START
        message += "; " + "; ".join(stuck)
    events: list[Event] = []
    if reason in (PODS_NOT_CREATED, WORKERS_CANNOT_START) and g.old.reason != reason:
        events.append(Event("Warning", reason, message))
    if spec_change_pending and g.job.spec.suspend:
        message = f"{message}; the edited spec is applied once the Jobs are suspended"
    elif spec_change_pending:
        note = (
            "the spec was edited while the job runs and is not applied (a Job's pod "
            "template is immutable): set spec.suspend: true to apply it, or delete and "
            "re-create the MultiWorkerJob"
        )
        message = f"{message}; {note}"
        if g.old.observed_generation != g.status.observed_generation:
            events.append(Event("Warning", "SpecChangeRejected", note))
    if patches and g.old.phase == "Suspended" and not g.job.spec.suspend:
        events.append(Event("Normal", "Resumed", "resumed (spec.suspend: false)"))
    status = with_workers(with_phase(g.status, phase, reason, message, g.now), ready, total)
    if phase == "Running" and status.start_time is None:
        status = dataclasses.replace(status, start_time=format_time(g.now))
    events.extend(transition_events(g.old, status))
    return Plan(
        status=None if status == g.old else status,
        patch_jobs=patches,
        events=tuple(events),
        # pods that cannot be created change no Job, nor does Kueue's message change one:
        # look again for the reason, or its end
        requeue_after=STALL_POLL_SECONDS
        if ((short or stuck) and not suspended) or (reason == "Queued" and admission.held(g.live))
        else None,
    )


def never_starting(
    pods: Iterable[Mapping[str, Any]],
    warnings: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> list[str]:
    """The workers whose trainer container waits on what will not come, in `wait`'s words
    (`never_starts.sentence`), a volume that does not mount read from the pod's `warnings`
    (events by pod name); the operator says it at once and keeps waiting (the image may
    be pushed, the Secret created), where `wait` gives up after `never_starts.GRACE_SECONDS`."""
    found = []
    for pod in pods:
        waiting = ((reading.trainer_container(pod) or {}).get("state") or {}).get("waiting")
        index = reading.pod_index(pod)
        if not waiting or index is None or reading.terminating(pod):
            continue
        reason, message = str(waiting.get("reason") or ""), str(waiting.get("message") or "")
        mount = never_starts.mount_warning((warnings or {}).get(reading.name(pod), ()))
        if reason == "ContainerCreating" and mount is not None:
            reason, message = mount
        end = never_starts.dead_end(reason, message)
        if end is not None:
            found.append((index, never_starts.sentence(index, end, message)))
    return [text for _, text in sorted(found)]


def _suspend_patches(g: Group) -> tuple[tuple[str, K8sObject], ...]:
    """Propagate spec.suspend to the Jobs that have not seen its current value yet."""
    wanted = bool_text(g.job.spec.suspend)
    return tuple(
        (
            name_of(j),
            {
                "metadata": {"annotations": {labels.SUSPEND_REQUESTED: wanted}},
                "spec": {"suspend": g.job.spec.suspend},
            },
        )
        for j in g.live
        if annotation_of(j, labels.SUSPEND_REQUESTED) != wanted
    )
