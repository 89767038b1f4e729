"""What a job is doing, worked out from its Jobs and Pods given as plain dicts.

Pure (no cluster access, no clock: `now` is passed in), so `tflaunch status`, `list`, `wait`
and `logs -f` share one reading of the objects and it can be tested with dicts. The reading
follows MultiWorkerMirroredStrategy: training only runs when every worker runs, a worker that
fails takes the group with it, and a Pending worker holds the others at the rendezvous (why
workers do not start is worked out in `launcher.cluster.stalls`).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from launcher.api import rules
from launcher.api.status import Status
from launcher.cluster import preemptions as preemptions_lib
from launcher.core import admission, labels, reading, worker_end
from launcher.core.group_status import group_status, newest_first, replacements
from launcher.core.timestamps import created_at, parse_time
from launcher.core.worker_end import WorkerEnd

State = Literal["Pending", "Running", "Succeeded", "Failed", "Suspended", "Unknown"]
Obj = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Worker:
    """One worker index and its newest pod."""

    index: int
    pod: str | None
    """The newest pod of this index; None when there is none (yet, or any more)."""
    phase: str
    """The pod's phase (Pending, Running, Succeeded, Failed), or Missing."""
    node: str | None
    restarts: int
    """Replacement pods: the Job makes a new pod each time one fails (restartPolicy Never)."""
    created: datetime.datetime | None
    reason: str | None
    """Why it is not running (or why it failed), e.g. `config error (exit 78)`."""
    exit_code: int | None = None
    finished: datetime.datetime | None = None
    """When its container terminated."""
    end: WorkerEnd | None = None
    """How its trainer ended, once it has (`launcher.core.worker_end`)."""
    waiting: str | None = None
    """The kubelet's whole message for a waiting container, which `reason` cuts: a pull
    error's verdict (`not found`, `connection refused`) comes at its end."""


@dataclasses.dataclass(frozen=True)
class JobStatus:
    """The whole job: its workers and its Jobs' verdict."""

    name: str
    namespace: str
    state: State
    workers: tuple[Worker, ...]
    expected: int
    """How many workers the job has (completions, or Jobs of the per-worker layout)."""
    layout: str
    condition: str | None
    """The Jobs' decisive condition, e.g. `Failed: PodFailurePolicy: ...`, `Complete`."""
    created: datetime.datetime | None = None
    jobs: tuple[str, ...] = ()
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """The labels every one of its Jobs carries (what `list -l` selects on)."""
    active: int | None = None
    """Active pods as the Jobs count them, when the pods themselves were not read (`list`)."""
    status: Status = dataclasses.field(default_factory=Status)
    """The group's Status read from its Jobs and Pods (`launcher.core.group_status`), the
    summary the operator stores for a MultiWorkerJob: restarts and preemptions come from it."""
    operator: Status | None = None
    """Its MultiWorkerJob's `.status`, read into the same type, when the operator runs the
    job (set by the CLI, which reads the resource; `launcher.cli.operator_jobs`)."""
    backoff_limit: int | None = None
    """Its MultiWorkerJob's spec.backoffLimit, when the operator runs the job."""
    divergence: reading.Divergence | None = None
    """A worker that failed in a collective after its peers finished the program (the
    programs diverged: `reading.Divergence`), read from every pod of the job."""
    evictions: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Kueue's evictions of its Workloads per reason (`admission.evictions`), when read."""
    restarts_in_place: int | None = None
    """Its group restarts in place (spec.restart inPlace), from the chief's log, when read
    (`launcher.cli.job_progress`; the operator's status.restarts counts them for its jobs)."""
    last_restart_in_place: str | None = None
    """The last one and its cause, in `launcher.core.in_place`'s words, when read."""
    stopped: str | None = None
    """`Reason: why` when `tflaunch wait` failed the Jobs on purpose (`launcher.cluster.stop`),
    e.g. the same worker OOM-killed again: said instead of the Job controller's words."""

    @property
    def preemptions(self) -> preemptions_lib.Preemptions:
        """The preemptions its pods rode out (exit 79), from `status`."""
        return preemptions_lib.of(self.status)

    @property
    def running(self) -> int:
        return sum(w.phase == "Running" for w in self.workers)

    @property
    def restarts(self) -> int:
        return self.status.restarts

    @property
    def finished(self) -> bool:
        return self.state in ("Succeeded", "Failed")


# --- Reading the objects -------------------------------------------------------------------


def summarize(
    name: str,
    namespace: str,
    jobs: Sequence[Obj],
    pods: Sequence[Obj],
    workloads: Sequence[Obj] | None = None,
) -> JobStatus:
    """The status of job `name` from its Jobs and Pods (all of them, old attempts included);
    with Kueue's `workloads` of its Jobs, a job Kueue holds back says why, and Kueue's
    evictions are counted (`admission`)."""
    indexed = reading.indexed(jobs)
    expected = _expected_workers(jobs, indexed)
    by_index: dict[int, list[Obj]] = {}
    for pod in pods:
        index = reading.pod_index(pod)
        if index is not None:
            by_index.setdefault(index, []).append(pod)
    workers = tuple(
        _worker(i, by_index.get(i, [])) for i in sorted(set(range(expected)) | set(by_index))
    )
    group = group_status(jobs, pods, workers=expected)
    stopped = next((s for j in jobs if (s := reading.annotations_of(j).get(labels.STOPPED))), None)
    condition = _condition(group, jobs, workloads)
    if stopped and group.phase == "Failed":  # failed on purpose: why, not BackoffLimitExceeded
        condition = f"Failed: {first_line(stopped, 400)}"
    created = min((t for j in jobs if (t := created_at(j)) is not None), default=None)
    return JobStatus(
        name=name,
        namespace=namespace,
        state=state_of(group, any(w.phase == "Running" for w in workers)),
        workers=workers,
        expected=expected,
        layout="indexed" if indexed or not jobs else "per-worker",
        condition=condition,
        created=created,
        jobs=tuple(sorted(reading.name(j) for j in jobs)),
        labels=common_labels(jobs),
        status=group,
        divergence=reading.pods_divergence(pods),
        evictions=admission.evictions(workloads or ()),
        stopped=stopped,
    )


def overview(name: str, namespace: str, jobs: Sequence[Obj]) -> JobStatus:
    """A job's status from its Jobs alone (`tflaunch list` reads no pods): no workers, the
    state from the Jobs' conditions and counts, `active` from their status."""
    summary = summarize(name, namespace, jobs, [])
    active = reading.active_workers(jobs)
    return dataclasses.replace(
        summary, state=state_of(summary.status, active > 0), workers=(), active=active
    )


def overviews(jobs: Iterable[Obj]) -> list[JobStatus]:
    """`overview` of every tflaunch job among `jobs`, in (namespace, name) order."""
    return [overview(name, ns, group) for (ns, name), group in group_jobs(jobs).items()]


def state_of(status: Status, running: bool) -> State:
    """The STATE `tflaunch status/list` show for the group's `status`: its phase when the
    group has finished or is suspended; else Running when a worker pod runs (`running`),
    Pending when none does; Unknown without Jobs."""
    if status.phase in ("Succeeded", "Failed", "Suspended"):
        return status.phase
    if status.phase is None:
        return "Unknown"
    return "Running" if running else "Pending"


def common_labels(jobs: Sequence[Obj]) -> dict[str, str]:
    """The labels (key and value) shared by all `jobs`."""
    sets = [set(reading.labels_of(j).items()) for j in jobs]
    return dict(sorted(set.intersection(*sets))) if sets else {}


def group_jobs(jobs: Iterable[Obj]) -> dict[tuple[str, str], list[Obj]]:
    """Kubernetes Jobs grouped by (namespace, tflaunch job name)."""
    groups: dict[tuple[str, str], list[Obj]] = {}
    for job in jobs:
        meta = job.get("metadata") or {}
        name = (meta.get("labels") or {}).get(labels.JOB_NAME)
        if name:
            groups.setdefault((meta.get("namespace") or "", name), []).append(job)
    return dict(sorted(groups.items()))


def _expected_workers(jobs: Sequence[Obj], indexed: bool) -> int:
    """How many workers the Jobs say the job has, at most `rules.MAX_WORKERS` (their labels
    and counts are anyone's who may create a Job: never a range to build blindly)."""
    if indexed:
        counts = [reading.spec(j).get("completions") for j in jobs]
        valid = [c for c in counts if isinstance(c, int) and not isinstance(c, bool)]
        return min(max([0, *valid]), rules.MAX_WORKERS)
    indices = [
        index
        for j in jobs
        if (index := labels.parse_index(_template_labels(j).get(labels.WORKER_INDEX))) is not None
    ]
    return min(max([len(jobs), *(i + 1 for i in indices)]), rules.MAX_WORKERS)


def _template_labels(job: Obj) -> Mapping[str, str]:
    return reading.labels_of(reading.pod_template(job))


def _worker(index: int, pods: list[Obj]) -> Worker:
    if not pods:
        return Worker(index, None, "Missing", None, 0, None, "no pod yet")
    pod = newest_first(pods)[0]
    phase, reason, exit_code = pod_state(pod)
    end = WorkerEnd.from_pod(pod)
    waiting = ((reading.trainer_container(pod) or {}).get("state") or {}).get("waiting") or {}
    return Worker(
        index=index,
        pod=reading.name(pod),
        phase=phase,
        node=reading.spec(pod).get("nodeName"),
        # A pod replaced after it saved and exited EXIT_PREEMPTED is a preemption
        # (`preemptions`), not a restart: the Job does not count it against backoffLimit.
        restarts=replacements(pods).get(index, 0),
        created=created_at(pod),
        reason=reason,
        exit_code=exit_code,
        finished=end.finished_at if end else None,
        end=end,
        waiting=first_line(waiting.get("message"), limit=1000) or None,
    )


def pod_state(pod: Obj) -> tuple[str, str | None, int | None]:
    """(phase, reason when not plainly running, exit code when terminated) of a worker pod."""
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    state = (reading.trainer_container(pod) or {}).get("state") or {}
    terminated = reading.terminated(pod)
    if pod.get("metadata", {}).get("deletionTimestamp") and phase in ("Pending", "Running"):
        return phase, "Terminating", None
    if phase == "Pending":
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return phase, _reason(condition.get("reason") or "Unschedulable", condition), None
        waiting = state.get("waiting")
        if waiting:
            return phase, _reason(waiting.get("reason") or "Waiting", waiting), None
        return phase, None, None
    if phase == "Running":
        waiting = state.get("waiting")
        return phase, _reason(waiting.get("reason"), waiting) if waiting else None, None
    if phase == "Failed":
        end = WorkerEnd.from_pod(pod)
        if terminated and end is not None:
            detail = end.detail()
            return phase, end.how() + (f": {first_line(detail)}" if detail else ""), end.exit_code
        return phase, _reason(status.get("reason") or "Failed", status), None
    return phase, None, (terminated or {}).get("exitCode")


def _reason(reason: str | None, source: Obj) -> str | None:
    message = first_line(source.get("message"))
    if not reason:
        return message
    return f"{reason}: {message}" if message else reason


def first_line(text: Any, limit: int = 160) -> str:
    """The first line of a message, cut to `limit` characters."""
    line = " ".join(str(text or "").strip().splitlines()[:1]).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _condition(
    status: Status, jobs: Sequence[Obj], workloads: Sequence[Obj] | None = None
) -> str | None:
    """The Jobs' decisive condition in words, for the phase `status` gives the group."""
    if status.phase == "Failed":
        failed = next((j, c) for j in jobs if (c := reading.job_failed(j)) is not None)
        return _condition_text("Failed", failed[1], failed[0], len(jobs) > 1)
    if status.phase == "Succeeded":
        return "Complete"
    if status.phase == "Suspended":
        queued = admission.waiting(jobs, workloads)
        return queued or "Suspended: the Job is suspended (e.g. queued by Kueue)"
    return None


def _condition_text(kind: str, condition: Obj, job: Obj, name_it: bool) -> str:
    parts = [kind]
    if name_it:
        parts[0] = f"{kind} (Job {job['metadata']['name']})"
    if condition.get("reason"):
        parts.append(str(condition["reason"]))
    message = first_line(condition.get("message"), 240)
    if message:
        parts.append(message)
    return ": ".join(parts)


# --- Time ----------------------------------------------------------------------------------


def age(since: datetime.datetime | None, now: datetime.datetime) -> str:
    """kubectl's compact age: 45s, 3m12s, 2h5m, 3d4h."""
    if since is None:
        return "-"
    seconds = max(0, int((now - since).total_seconds()))
    return duration(seconds)


def ran_for(status: JobStatus) -> float | None:
    """How long the job ran, from its first worker's start to its end (the group Status'
    startTime and completionTime); None while either is unknown."""
    started = parse_time(status.status.start_time)
    ended = parse_time(status.status.completion_time)
    if started is None or ended is None:
        return None
    return max(0.0, (ended - started).total_seconds())


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds}s" if minutes < 10 and seconds else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if hours else f"{days}d"


# --- Waiting -------------------------------------------------------------------------------


NAMED_RESTARTS = 3
"""Up to this many restarted workers are named in `wait`'s line; more are counted."""


def progress_line(
    status: JobStatus, elapsed: float, training: str | None = None, generation: int | None = None
) -> str:
    """The live one-liner of `tflaunch wait`; `training` says where training stands (the
    chief's progress), `generation` the group restarts its program counted (restarts in
    place replace no pod, so only the program knows). Its length does not grow with the
    number of workers."""
    parts = [
        f"{status.name}: {status.state.lower()}",
        f"{status.running}/{status.expected} workers running",
    ]
    pending = [w.index for w in status.workers if w.phase in ("Pending", "Missing")]
    if pending and not status.finished:
        parts.append(f"{len(pending)} pending")
    if training:
        parts.append(training)
    if status.preemptions.count:
        parts.append(status.preemptions.short())
    restarted = [w for w in status.workers if w.restarts]
    if generation and generation > status.restarts:
        parts.append(f"restarts in place: {generation}")
    elif len(restarted) > NAMED_RESTARTS:
        parts.append(f"restarts: {len(restarted)} workers, {status.restarts} in all")
    elif restarted:
        parts.append(f"restarts: {', '.join(f'worker {w.index} x{w.restarts}' for w in restarted)}")
    else:
        parts.append("no restarts")
    parts.append(duration(elapsed))
    return ", ".join(parts)


def failure_message(status: JobStatus) -> str:
    """Why the job failed: its condition, then the worker to blame and how each failed worker
    ended, in the words `tflaunch local` and the operator use (`worker_end.account`)."""
    ends = [w.end for w in status.workers if w.end is not None]
    failed = [w for w in status.workers if w.phase == "Failed"]
    text = f"job {status.name} failed: {status.condition or 'Failed'}"
    if status.stopped and status.state == "Failed":
        pass  # the condition says why it was stopped, naming the culprit
    elif any(end.failed for end in ends):
        text += f"; {worker_end.account(ends)}"
        if why := worker_end.not_retried(worker_end.culprit(ends)):
            text += f"; {why}"
    elif failed:  # a pod that failed without its trainer ending (evicted before it started)
        text += "; " + "; ".join(
            f"worker {w.index} failed: {w.reason or 'unknown'}" for w in failed
        )
    # Each group restart replaces the culprit's pod (and most often every pod): the most
    # replaced worker counts them, where the sum over workers counts pods.
    if restarts := max((w.restarts for w in status.workers), default=0):
        text += f"; after {restarts} group restart{'s' if restarts != 1 else ''}"
    return f"{text}; {status.divergence.describe()}" if status.divergence else text
