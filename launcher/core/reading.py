"""One reading of the cluster: Jobs and Pods (plain dicts) turned into what every caller
decides from.

`tflaunch status/wait/list` (`launcher.cluster.status`), the operator (`launcher.operator`)
and `tflaunch local` (`group_outcome`, for its processes) all read the objects here, so they
cannot disagree on what "complete" means, which container state says how a worker ended,
which worker a pod is, or how exits group into preemptions. Pure: dicts in, values out.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from launcher.core import contract, exit_policy, labels, untrusted
from launcher.core.exit_policy import GroupAction
from launcher.core.timestamps import parse_time

Obj = Mapping[str, Any]

COMPLETE = ("Complete", "SuccessCriteriaMet")
"""The Job condition types that say it succeeded (SuccessCriteriaMet comes first, while the
last pods terminate, on Kubernetes >= 1.31)."""
FAILED = ("Failed", "FailureTarget")
"""The Job condition types that say it failed (FailureTarget: on its way to Failed)."""
DEFAULT_GRACE_SECONDS = 30
"""The pod's terminationGracePeriodSeconds when its spec does not say (Kubernetes' default)."""


# --- Any object ----------------------------------------------------------------------------


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def name(obj: Obj) -> str:
    return str(meta(obj).get("name") or "")


def labels_of(obj: Obj) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


def annotations_of(obj: Obj) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def owner_references(obj: Obj) -> list[Obj]:
    return list(meta(obj).get("ownerReferences") or ())


def terminating(obj: Obj) -> bool:
    """Whether the object is being deleted (it has a deletionTimestamp)."""
    return bool(meta(obj).get("deletionTimestamp"))


def spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def status(obj: Obj) -> Obj:
    return obj.get("status") or {}


# --- Jobs ----------------------------------------------------------------------------------


def true_conditions(job: Obj) -> dict[str, Obj]:
    """A Job's conditions that hold, by type."""
    return {
        str(c.get("type")): c
        for c in status(job).get("conditions") or []
        if c.get("status") == "True"
    }


def job_complete(job: Obj) -> bool:
    conditions = true_conditions(job)
    return any(kind in conditions for kind in COMPLETE)


def job_failed(job: Obj) -> Obj | None:
    """The condition that says the Job failed, if one does."""
    conditions = true_conditions(job)
    return next((conditions[kind] for kind in FAILED if kind in conditions), None)


def job_suspended(job: Obj) -> bool:
    """Whether the Job is suspended (spec.suspend, or its Suspended condition)."""
    return bool(spec(job).get("suspend")) or "Suspended" in true_conditions(job)


def indexed(jobs: Iterable[Obj]) -> bool:
    """Whether the Jobs are of the indexed layout (one Job, completionMode Indexed)."""
    return any(spec(j).get("completionMode") == "Indexed" for j in jobs)


def ready_workers(jobs: Iterable[Obj]) -> int:
    """Worker pods running and ready, as the Jobs count them (status.ready)."""
    return sum(_count(status(j).get("ready")) for j in jobs)


def active_workers(jobs: Iterable[Obj]) -> int:
    """Worker pods that have not ended, as the Jobs count them (status.active)."""
    return sum(_count(status(j).get("active")) for j in jobs)


def job_start_time(job: Obj) -> datetime.datetime | None:
    return parse_time(status(job).get("startTime"))


def job_end_time(job: Obj) -> datetime.datetime | None:
    """When the Job succeeded (status.completionTime) or failed (its condition's time)."""
    ended = parse_time(status(job).get("completionTime"))
    failed = job_failed(job)
    return ended or (parse_time(failed.get("lastTransitionTime")) if failed else None)


def job_worker_index(job: Obj) -> int | None:
    """The worker a per-worker Job runs (its pod template's index label); None otherwise."""
    template_meta = pod_template(job).get("metadata") or {}
    return labels.worker_index_of(template_meta.get("labels") or {}, {})


def success_policy(jobs: Iterable[Obj]) -> str:
    """The group's spec.successPolicy, as its Jobs say it: chief when one is annotated so."""
    chief = any(annotations_of(j).get(labels.SUCCESS_POLICY) == "chief" for j in jobs)
    return "chief" if chief else "allWorkers"


def group_succeeded(jobs: Sequence[Obj], *, workers: int) -> bool:
    """Whether the group of `workers` workers that these (live) Jobs run has succeeded.

    allWorkers: every Job is complete (one per worker in the per-worker layout). chief: the
    Job of worker 0 is complete and no other Job had failed before it; the indexed Job
    decides that itself (its successPolicy names index 0). A succeeded group stays so
    whatever its other workers do after (a TFJob's default successPolicy).
    """
    if not jobs:
        return False
    if indexed(jobs) or success_policy(jobs) == "allWorkers":
        enough = indexed(jobs) or len(jobs) >= workers  # every per-worker Job exists
        return enough and all(job_complete(j) for j in jobs)
    chief = next((j for j in jobs if job_worker_index(j) == 0), None)
    if chief is None or not job_complete(chief):
        return False
    done = job_end_time(chief)
    failed = [t for j in jobs if job_failed(j) is not None and (t := job_end_time(j))]
    return done is None or all(t >= done for t in failed)


def pod_template(job: Obj) -> Obj:
    """The Job's pod template (metadata and spec)."""
    return spec(job).get("template") or {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# --- Pods ----------------------------------------------------------------------------------


def pod_index(pod: Obj) -> int | None:
    """The worker index of a pod, whichever layout created it; None when it has none."""
    return labels.worker_index_of(labels_of(pod), annotations_of(pod))


def phase(pod: Obj) -> str | None:
    """The pod's phase (Pending, Running, Succeeded, Failed, Unknown); None before it has one."""
    value = status(pod).get("phase")
    return None if value is None else str(value)


def ended(pod: Obj) -> bool:
    """Whether the pod has ended (phase Succeeded or Failed)."""
    return phase(pod) in ("Succeeded", "Failed")


def trainer_container(pod: Obj) -> Obj | None:
    """The trainer container's status (the first container's, when none is named trainer)."""
    containers = status(pod).get("containerStatuses") or []
    container = next((c for c in containers if c.get("name") == "trainer"), None)
    return container if container is not None else (containers[0] if containers else None)


def terminated(pod: Obj) -> Obj | None:
    """How the trainer container ended: its current terminated state, else its last one;
    None while it has not terminated."""
    container = trainer_container(pod) or {}
    for key in ("state", "lastState"):
        state = (container.get(key) or {}).get("terminated")
        if isinstance(state, Mapping) and state:
            return state
    return None


def exit_code(pod: Obj) -> int | None:
    """The trainer's exit code (`terminated`); None while it has not exited."""
    code = (terminated(pod) or {}).get("exitCode")
    return code if isinstance(code, int) else None


def preempted(pod: Obj) -> bool:
    """Whether the worker saved and exited EXIT_PREEMPTED (a preemption, not a failure)."""
    return exit_code(pod) == contract.EXIT_PREEMPTED


@dataclasses.dataclass(frozen=True)
class WorkerExit:
    """How one worker pod ended badly (its trainer container's terminated state)."""

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


def failed_workers(pods: Iterable[Obj]) -> list[WorkerExit]:
    """Workers whose trainer exited non-zero (or whose pod failed), by worker index; a
    preemption (the exit table's "resume") is not a failure."""
    exits = []
    for pod in pods:
        state = terminated(pod)
        pod_status = status(pod)
        code = state.get("exitCode") if state else None
        if (code is None or code == contract.EXIT_OK) and pod_status.get("phase") != "Failed":
            continue
        if code is not None and exit_policy.group_action(code) == "resume":
            continue
        exits.append(
            WorkerExit(
                worker=pod_index(pod),
                pod=name(pod),
                exit_code=code,
                reason=str((state or {}).get("reason") or pod_status.get("reason") or ""),
                message=untrusted.cut(str((state or {}).get("message") or "")),
            )
        )
    return sorted(exits, key=lambda e: (e.worker is None, e.worker or 0, e.pod))


@dataclasses.dataclass(frozen=True)
class Divergence:
    """A worker that failed waiting for peers which had finished their programs (exit 0).

    A finished peer ran every collective operation its program asked for, and each one
    needs every worker; so the waiting worker asked for one more, which no peer would ever
    join: the programs took different paths (most often a save or an evaluation only the
    chief runs). Deterministic: a restart repeats it, after training again.
    """

    worker: int
    error: str
    """TensorFlow's exception, by name (`UnavailableError`)."""
    finished: tuple[int, ...]

    def describe(self) -> str:
        peers = ", ".join(map(str, self.finished))
        workers = "worker" if len(self.finished) == 1 else "workers"
        return (
            f"worker {self.worker} failed in a collective operation ({self.error}) after "
            f"{workers} {peers} had finished the program (exit 0): the workers ran different "
            "collectives, so they took different paths through the program (a model.save, "
            "save_weights or evaluation only the chief runs, a step count that differs "
            "between workers); under MultiWorkerMirroredStrategy every worker must run "
            "them (each worker saves, the chief to its path, the others to a temporary one)"
        )


def divergence(
    finished: Iterable[int], failed: Iterable[tuple[int, str | None]]
) -> Divergence | None:
    """The programs' divergence (`Divergence`), when a worker of `failed` (worker, its last
    error) ended with a peer error while the workers of `finished` had exited 0."""
    done = tuple(sorted(finished))
    if not done:
        return None
    for worker, reason in sorted(failed, key=lambda f: f[0]):
        error = exit_policy.peer_error(reason)
        if error:
            return Divergence(worker, error, done)
    return None


def pods_divergence(pods: Iterable[Obj]) -> Divergence | None:
    """`divergence` read from the worker pods: exit 0 of the trainer container is a finished
    worker, the termination message's last line a failed worker's last error."""
    pods = list(pods)
    finished = {
        index
        for pod in pods
        if exit_code(pod) == contract.EXIT_OK and (index := pod_index(pod)) is not None
    }
    failed = [
        (e.worker, e.message.strip().splitlines()[-1] if e.message.strip() else None)
        for e in failed_workers(pods)
        if e.worker is not None
    ]
    return divergence(finished, failed)


# --- Preemptions ---------------------------------------------------------------------------
#
# A worker told to stop (SIGTERM: eviction, drain, preemption) saves and exits
# `contract.EXIT_PREEMPTED`, with the saved step in its termination message. One preemption
# makes every worker save at the same step and exit within the pod's grace period. So, oldest
# exit first, an exit joins the current preemption when it finished within the grace period
# of that preemption's first exit *and* names the same saved step (or either names none: a
# program that writes no termination message); a different step, or a later exit, is the
# next preemption.


@dataclasses.dataclass(frozen=True)
class PreemptedExit:
    """One worker pod that saved and exited EXIT_PREEMPTED."""

    pod: str
    index: int | None
    finished: datetime.datetime
    step: int | None
    """The step it saved at, from its termination message; None when it wrote none."""
    grace_seconds: float


def preempted_exits(pods: Iterable[Obj]) -> list[PreemptedExit]:
    """The pods whose trainer exited EXIT_PREEMPTED, oldest exit first (pods without
    finishedAt, which a kubelet always writes, are left out: they cannot be placed in time)."""
    exits = []
    for pod in pods:
        state = terminated(pod)
        if state is None or state.get("exitCode") != contract.EXIT_PREEMPTED:
            continue
        finished = parse_time(state.get("finishedAt"))
        if finished is None:
            continue
        grace = spec(pod).get("terminationGracePeriodSeconds")
        exits.append(
            PreemptedExit(
                pod=name(pod),
                index=pod_index(pod),
                finished=finished,
                step=contract.saved_step(state.get("message")),
                grace_seconds=float(DEFAULT_GRACE_SECONDS if grace is None else grace),
            )
        )
    return sorted(exits, key=lambda e: (e.finished, e.pod))


def preemption_events(exits: Iterable[PreemptedExit]) -> list[list[PreemptedExit]]:
    """`exits` (oldest first) grouped into preemptions (see above)."""
    grouped: list[list[PreemptedExit]] = []
    for exit_ in exits:
        if grouped and same_preemption(grouped[-1], exit_):
            grouped[-1].append(exit_)
        else:
            grouped.append([exit_])
    return grouped


def same_preemption(event: list[PreemptedExit], exit_: PreemptedExit) -> bool:
    """Whether `exit_` belongs to the preemption `event` (its exits, oldest first)."""
    first = event[0]
    grace = datetime.timedelta(seconds=max(e.grace_seconds for e in [*event, exit_]))
    if exit_.finished - first.finished > grace:
        return False
    steps = {e.step for e in event if e.step is not None}
    return exit_.step is None or not steps or exit_.step in steps


# --- The group's outcome -------------------------------------------------------------------


def codes_succeeded(codes: Sequence[int | None], success: str = "allWorkers") -> bool:
    """Whether workers 0..N-1 that exited with `codes` (None: still running, or stopped with
    the group) made the group succeed under spec.successPolicy `success`: every worker
    exited 0 (allWorkers), or worker 0 did (chief)."""
    if success == "chief":
        return bool(codes) and codes[0] == contract.EXIT_OK
    return bool(codes) and all(code == contract.EXIT_OK for code in codes)


def group_outcome(
    codes: Sequence[int | None],
    *,
    restarts: int,
    backoff_limit: int,
    repeats: bool = False,
    success: str = "allWorkers",
) -> GroupAction:
    """What the worker group does after an attempt that ended with the workers' exit `codes`
    (None: a worker that did not exit on its own, stopped with the group).

    done: the group succeeded (`codes_succeeded` under `success`). fail: an exit the table
    fails (a configuration error), or the restart budget (`backoff_limit`) is spent, or
    `repeats` (the same program error in every worker: a restart would repeat it). resume: a
    preemption (every exit that is not 0 is one the table resumes from; uses no retry).
    restart: anything else.
    """
    if codes_succeeded(codes, success):
        return "done"
    actions = [exit_policy.group_action(code) if code is not None else None for code in codes]
    if "fail" in actions:
        return "fail"
    if "resume" in actions and set(actions) <= {"done", "resume", None}:
        return "resume"
    if repeats or restarts >= backoff_limit:
        return "fail"
    return "restart"
