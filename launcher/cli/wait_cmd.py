"""`tflaunch wait` (and `submit --wait`): follow a job until it succeeds, fails or times out.

Waiting is watching (`launcher.cluster.watch`): the job's Jobs and Pods stream in, the pure
reader `launcher.cluster.status` says where the job stands, and this module turns that into a
live progress line, one-time warnings (workers Pending too long, pods that cannot be created)
and the exit code: 0 succeeded, 3 failed (which worker, why), 4 timed out. An API server that
goes away meanwhile is waited out (`launcher.cluster.retry`), bounded by --timeout.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from launcher.cli import job_progress, oom_kills, output, queued
from launcher.cli.completion import job_name_argument
from launcher.cli.durations import DURATION, EXAMPLE
from launcher.cli.options import cluster_options, connect, namespace_option, program_name
from launcher.cluster import stalls, status
from launcher.core import admission, never_starts, oom, reading
from launcher.core.errors import (
    ClusterError,
    ExitStatus,
    JobFailed,
    NeverStarts,
    NotFound,
    WaitTimeout,
)
from launcher.core.progress import fit
from launcher.core.worker_end import WorkerEnd

if TYPE_CHECKING:  # the kubernetes client takes half a second to import: only when used
    from launcher.cluster.client import Cluster
    from launcher.cluster.find import JobObjects

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_PENDING_WARNING = 120.0


def now() -> datetime.datetime:
    return datetime.datetime.now(tz=datetime.timezone.utc)


def not_found(name: str, namespace: str) -> NotFound:
    return NotFound(
        f"job {name} not found in namespace {namespace}; see {program_name()} list -n {namespace}"
        " (or -A for every namespace)"
    )


def wait_options(func: F) -> F:
    """--timeout and --pending-warning, shared by `wait` and `submit --wait`."""
    func = click.option(
        "--pending-warning",
        type=DURATION,
        default=DEFAULT_PENDING_WARNING,
        show_default=True,
        metavar="DURATION",
        help="Warn when workers stay Pending this long (MWMS needs all of them), e.g. 2m.",
    )(func)
    return click.option(
        "--timeout",
        type=DURATION,
        metavar="DURATION",
        help=f"Stop waiting after this long, {EXAMPLE} (default: never).",
    )(func)


# --- wait ----------------------------------------------------------------------------------


@click.command("wait")
@job_name_argument()
@wait_options
@output.output_option()
@namespace_option
@cluster_options
def wait_command(
    name: str,
    timeout: float | None,
    pending_warning: float,
    fmt: str | None,
    namespace: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
) -> int:
    """Watch job NAME until it succeeds (exit 0), fails (exit 3) or --timeout passes (exit 4).

    A worker that will never start (its image absent or invalid, a Secret or ConfigMap it
    needs missing, a volume that does not mount) ends the wait after 30 s of that with exit
    5, naming it and the fix. The same worker OOM-killed again at about the same step is
    not restarted: the wait fails the job's Jobs (backoffLimit 0) and exits 3.

    With -o, the job's final status is printed on stdout as `status -o` prints it (also when
    it failed or the wait timed out; the exit code still says which).

    \b
    Examples:
      tflaunch wait mnist --timeout 1h            # or 3600 (seconds)
      tflaunch wait mnist -o json > result.json
    """
    cluster = connect(kubeconfig, kube_context)

    def print_result(summary: status.JobStatus) -> None:
        click.echo(output.render([summary], fmt, now(), single=True))

    ns = namespace or cluster.namespace
    on_result = print_result if fmt else None
    return wait_for_job(cluster, name, ns, timeout, pending_warning, on_result=on_result)


class _Progress:
    """The live progress line on stderr: redrawn in place on a terminal, else printed when
    it changes (time excluded)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = ""
        self.drawn = False

    def show(self, line: str, key: str) -> None:
        if self.tty:  # cut to the terminal's width: a wrapped line cannot be redrawn in place
            line = fit(line, shutil.get_terminal_size().columns - 1)
            click.echo(f"\r\x1b[2K{line}", nl=False, err=True)
            self.drawn = True
        elif key != self.last:
            click.echo(line, err=True)
        self.last = key

    def say(self, text: str) -> None:
        self.clear()
        click.echo(text, err=True)

    def clear(self) -> None:
        if self.drawn:
            click.echo("\r\x1b[2K", nl=False, err=True)
            self.drawn = False


REASON_GRACE_SECONDS = 10.0
"""How much longer than the threshold a missing-pod warning waits for the server's reason
(the Job controller's FailedCreate event) before it warns without one."""


class _MissingPods:
    """Warns once per Job when it has had fewer pods than it should run for longer than the
    pending threshold: those workers never get a pod (a ResourceQuota, LimitRange or webhook
    refused it), so they never show up as Pending. The warning quotes the server's reason."""

    def __init__(self, cluster: Cluster, namespace: str, threshold: float) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.threshold = threshold
        self.since: dict[str, float] = {}
        self.warned: set[str] = set()

    def warnings(self, objects: JobObjects) -> list[str]:
        """The warnings due now (each Job's at most once while it stays short)."""
        now = time.monotonic()
        short = {s.job: s for s in stalls.missing_pods(objects.jobs, objects.pods)}
        for gone in set(self.since) - set(short):
            del self.since[gone]
            self.warned.discard(gone)
        messages = []
        for name, shortfall in short.items():
            started = self.since.setdefault(name, now)
            if name in self.warned or now - started <= self.threshold:
                continue
            job = next(j for j in objects.jobs if j["metadata"]["name"] == name)
            cause = stalls.creation_blocked_by(job, self._events(name))
            if cause is None and shortfall.failed:
                self.since[name] = now  # likely the controller's backoff after a failed pod
                continue
            if cause is None and now - started <= self.threshold + REASON_GRACE_SECONDS:
                continue  # the controller's event may lag on a busy API server: wait for it
            self.warned.add(name)
            messages.append(stalls.missing_warning(shortfall, self.threshold, cause))
        return messages

    def _events(self, job: str) -> list[Any]:
        from launcher.cluster import find
        from launcher.cluster.retry import retrying

        try:
            return retrying(
                lambda: find.job_events(self.cluster, job, self.namespace), self.cluster.outage
            )
        except ClusterError:  # e.g. no RBAC to list events: warn without the reason
            return []


@dataclasses.dataclass(frozen=True)
class _Blocked:
    new: list[tuple[str, float]]
    """Dead ends seen for the first time (a warning each), with how long they may last."""
    expired: list[str]
    """Dead ends that lasted their grace (`never_starts.grace_seconds`): the wait ends."""
    workers: set[int]


class _DeadEnds:
    """Workers that will never start (`never_starts`), and since when each has been so."""

    def __init__(self) -> None:
        self.since: dict[tuple[int, str | None], float] = {}
        self.said: dict[tuple[int, str | None], tuple[str, float]] = {}

    def update(self, summary: status.JobStatus) -> _Blocked:
        clock = time.monotonic()
        current = {
            (w.index, w.pod): (
                never_starts.sentence(w.index, end, message),
                never_starts.grace_seconds(end),
            )
            for w, end, message in stalls.dead_ends(summary)
        }
        backing_off = {  # between two failed pulls the kubelet says only "back-off"
            (w.index, w.pod)
            for w in summary.workers
            if (w.reason or "").startswith(("ImagePullBackOff", "ErrImagePull"))
        }
        for gone in set(self.since) - set(current) - backing_off:
            del self.since[gone], self.said[gone]
        new = [said for key, said in current.items() if key not in self.since]
        for key, said in current.items():
            self.since.setdefault(key, clock)
            self.said[key] = said
        expired = [
            line
            for key, since in self.since.items()
            for line, grace in [self.said[key]]
            if clock - since >= grace
        ]
        return _Blocked(new, expired, {key[0] for key in self.since})


def wait_for_job(
    cluster: Cluster,
    name: str,
    namespace: str,
    timeout: float | None,
    pending_warning: float,
    *,
    on_result: Callable[[status.JobStatus], None] | None = None,
) -> int:
    """Watch the job's Jobs and Pods; report progress, restarts and stalls; raise on failure.

    `on_result` receives the job's final status (succeeded, failed or at the timeout) before
    this returns or raises.
    """
    report = on_result or (lambda _summary: None)
    from launcher.cluster import find, operated, watch
    from launcher.cluster.retry import retrying

    start = time.monotonic()
    progress = _Progress()
    warned: set[tuple[int, str | None]] = set()
    restarts: dict[int, int] = {}
    announced_preemptions = 0
    seen = False
    ended_before = False
    missing = _MissingPods(cluster, namespace, pending_warning)
    dead_ends = _DeadEnds()
    workloads = queued.Workloads(cluster)
    said_queued: str | None = None
    resource: dict[str, Any] | None = None
    training: job_progress.Seen | None = None
    in_place_count = 0
    said_in_place = 0
    read_at = -job_progress.REFRESH_SECONDS
    failed = oom_kills.Failures()
    pod_warnings = _PodWarnings(cluster, namespace)
    stopping = False

    def say_restarts_in_place(chief: job_progress.Chief) -> None:
        """One line per restart in place not said yet, with its worker and cause."""
        nonlocal said_in_place
        for restart in chief.restarts:
            if restart.generation > said_in_place:
                said_in_place = restart.generation
                progress.say(
                    f"{name}: restart in place {restart.generation}: {restart.describe()}; "
                    "every worker restarts its program in its pod, resuming from the last "
                    "checkpoint"
                )

    try:
        for objects in watch.watch_job(cluster, name, namespace, tick=0.5):
            elapsed = time.monotonic() - start
            if not seen:  # the operator's job? Then its MultiWorkerJob's status is the verdict
                resource = operated.operator_job(cluster, name, namespace, objects.jobs)
                if resource is not None:
                    break  # ends the watch
            if not objects.jobs:
                if seen:
                    raise JobFailed(f"job {name} was deleted while waiting for it")
                raise not_found(name, namespace)
            held = workloads.read(objects.jobs)
            summary = status.summarize(name, namespace, objects.jobs, objects.pods, held)
            summary = pod_warnings.apply(summary)
            waiting = admission.waiting(objects.jobs, held)
            if waiting and waiting != said_queued:  # Kueue holds it back: no pod, no stall
                progress.say(f"{name}: {waiting}")
            said_queued = waiting
            if not seen:  # finished before this wait began: its own duration, not the wait's
                ended_before = summary.finished
            seen = True
            failed.update(objects.pods, functools.partial(_chief_step, cluster, summary, training))
            for w in summary.workers:  # restarts: replacements after failures, not preemptions
                failures = w.restarts
                if failures > restarts.get(w.index, 0):
                    progress.say(
                        f"{name}: worker {w.index} restarted ({failures} so far)"
                        f"{_how(failed.latest(w.index))}; the whole group restarts with it, "
                        "resuming from the last checkpoint"
                    )
                restarts[w.index] = max(failures, restarts.get(w.index, 0))
            again = oom.killed_again(failed.attempts(), _tolerance(training))
            if again and not stopping and not summary.finished:
                stopping = True
                _stop(cluster, name, namespace, objects.jobs, again, progress.say)
            if summary.preemptions.count > announced_preemptions:
                announced_preemptions = summary.preemptions.count
                progress.say(f"{name}: {summary.preemptions.words()}; the Job replaces the pods")
            blocked = dead_ends.update(summary)
            for line, grace in blocked.new:
                progress.say(f"warning: {line}; the wait ends unless it starts within "
                             f"{status.duration(grace)}")  # fmt: skip
            if blocked.expired:
                progress.clear()
                report(summary)
                raise NeverStarts(
                    f"job {name} cannot start: {blocked.expired[0]}; its objects are left as "
                    f"they are: fix it and resubmit, or {program_name()} delete {name} -n "
                    f"{namespace}"
                )
            stalled = [
                w
                for w in stalls.pending_too_long(summary, now(), pending_warning)
                if (w.index, w.pod) not in warned and w.index not in blocked.workers
            ]
            if stalled:
                warned.update((w.index, w.pod) for w in stalled)
                progress.say(
                    f"warning: {stalls.pending_warning(summary, stalled, pending_warning)}"
                )
            for warning in missing.warnings(objects):
                progress.say(f"warning: {warning}")
            if summary.state == "Running" and elapsed - read_at >= job_progress.REFRESH_SECONDS:
                chief = job_progress.read_chief(cluster, summary)
                training = chief.training or training
                in_place_count = max(in_place_count, chief.restarts_in_place)
                say_restarts_in_place(chief)
                read_at = elapsed
            line = status.progress_line(
                summary, elapsed, training.short() if training else None, in_place_count
            )
            progress.show(line, line.rpartition(", ")[0])
            if summary.finished and not ended_before:
                # The restarts in place since the last read (up to REFRESH_SECONDS ago).
                say_restarts_in_place(job_progress.read_chief(cluster, summary))
            if summary.state == "Succeeded":
                preempted_text = summary.preemptions.words()
                also = f" ({preempted_text})" if preempted_text else ""
                ran = status.ran_for(summary) if ended_before else None
                took = status.duration(elapsed if ran is None else ran)
                progress.say(f"job {name} succeeded in {took}{also}")
                report(summary)
                return ExitStatus.SUCCESS
            if summary.state == "Failed":
                # The Pod watch may lag the Job's: read the pods once more for the culprit.
                final = retrying(lambda: find.job_objects(cluster, name, namespace), cluster.outage)
                jobs = final.jobs or objects.jobs
                summary = status.summarize(name, namespace, jobs, final.pods or objects.pods)
                progress.clear()
                report(summary)
                earlier = summary.preemptions.short()  # rode out, not why it failed
                also = f" (earlier: {earlier})" if earlier else ""
                raise JobFailed(status.failure_message(summary) + also)
            if timeout is not None and elapsed > timeout:
                progress.clear()
                report(summary)
                raise WaitTimeout(
                    f"job {name} did not finish within {status.duration(timeout)} ({line}); it "
                    f"keeps running: {program_name()} status {name} -n {namespace}"
                )
        if resource is not None:
            from launcher.cli import operator_jobs

            try:
                return operator_jobs.wait_for_multiworkerjob(
                    cluster, resource, timeout, pending_warning, progress.say, progress.show
                )
            finally:  # -o json|yaml: the workers as they are now
                if on_result is not None:
                    final = retrying(
                        lambda: find.job_objects(cluster, name, namespace), cluster.outage
                    )
                    summary = status.summarize(name, namespace, final.jobs, final.pods)
                    owner = str(resource["metadata"]["name"])
                    latest = retrying(
                        lambda: operated.get_multiworkerjob(cluster, owner, namespace),
                        cluster.outage,
                    )
                    report(operator_jobs.with_resource(summary, latest or resource))
    finally:
        progress.clear()
    raise AssertionError("watch_job never ends")  # pragma: no cover


POD_EVENTS_SECONDS = 5.0
"""How often `wait` reads the events of pods stuck in ContainerCreating (one list each)."""


class _PodWarnings:
    """The Warning events of the pods whose container waits in ContainerCreating, where
    alone a volume that does not mount shows (FailedMount): read every POD_EVENTS_SECONDS,
    kept in between so that a dead end's grace runs on."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.events: dict[str, list[Any]] = {}
        self.read_at = -POD_EVENTS_SECONDS

    def apply(self, summary: status.JobStatus) -> status.JobStatus:
        pods = stalls.creating(summary)
        if not pods:
            return summary
        if time.monotonic() - self.read_at >= POD_EVENTS_SECONDS:
            from launcher.cluster import find

            self.events = find.warnings_of(self.cluster, pods, self.namespace)
            self.read_at = time.monotonic()
        return stalls.with_pod_warnings(summary, self.events)


def _chief_step(
    cluster: Cluster, summary: status.JobStatus, training: job_progress.Seen | None
) -> int | None:
    """The chief's step over all epochs now: its log read at once (a failure was just seen;
    the last read may be REFRESH_SECONDS old), else the last one read."""
    seen = job_progress.read_chief(cluster, summary).training or training
    if seen is None:
        return None
    p = seen.progress
    return oom.global_step(p.epoch, p.steps, p.step)


def _tolerance(training: job_progress.Seen | None) -> int:
    """How far past an OOM kill's step a second one is still "about the same point": an
    epoch, as the operator reads it."""
    return training.progress.steps if training else 0


def _how(failure: tuple[WorkerEnd, int | None] | None) -> str:
    """`: it was OOMKilled (exit 137) at its memory limit 200Mi, at step 40: raise ...`."""
    if failure is None:
        return ""
    end, step = failure
    detail = end.detail()
    return f": it {end.how(step)}" + (f": {detail}" if detail else "")


def _stop(
    cluster: Cluster,
    name: str,
    namespace: str,
    jobs: Sequence[Any],
    again: oom.Again,
    say: Callable[[str], None],
) -> None:
    """Fail the plain job's Jobs (`launcher.cluster.stop`) rather than let the group loop;
    the watch then sees them Failed and ends with exit 3 in `status.failure_message`'s
    words."""
    from launcher.cluster import stop

    why = f"{again.kill.describe()}; {again.why}"
    culprit = [j for j in jobs if reading.job_worker_index(j) == again.kill.culprit.index]
    ordered = [*culprit, *(j for j in jobs if j not in culprit)]
    try:
        stop.fail_jobs(cluster, ordered, namespace, "OOMKilledAgain", why)
    except ClusterError as e:
        raise JobFailed(
            f"job {name}: {why}; it could not be stopped ({e}), so it keeps restarting: "
            f"{program_name()} delete {name} -n {namespace}"
        ) from e
    say(f"{name}: {why}; stopping the group: its Jobs' backoffLimit set to 0")


COMMANDS = (wait_command,)
