"""The operator edge: kopf tells us what changed, `reconcile.decide()` says what to do.

kopf only watches and calls us; every decision is in the pure `launcher.operator.reconcile`,
and every Kubernetes call goes through `launcher.cluster`. One reconcile reads the MultiWorkerJob
and its Jobs and pods afresh, decides, writes the status, then acts, so it does not matter
which event caused it, or how many: the handlers only say "look at this MultiWorkerJob".

* Events: the MultiWorkerJob itself, and the Jobs it owns (a pod's failure, readiness and
  completion all show on its Job's status). No pod watch, no timers: a plan's
  `requeue_after` (TTL, a deletion that takes a while) schedules the next look.
* One reconcile per MultiWorkerJob at a time; events that arrive meanwhile are folded into
  one more run. No finalizers and no kopf state on the resource: `kubectl delete mwj`
  works with the operator stopped, and the garbage collector removes the children.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

import kopf

from launcher.cluster import apply, client, find, logs, operated, stalls
from launcher.cluster.client import Cluster, credentials
from launcher.core import admission, labels, reading, tfjob
from launcher.core.errors import (
    ClusterError,
    Conflict,
    Invalid,
    NotFound,
    TflaunchError,
    TransientClusterError,
)
from launcher.operator import (
    crd,
    in_place,
    leader,
    observe,
    progress,
    reconcile,
    tenancy,
    tfjob_edge,
    tfjobs,
)

logger = logging.getLogger("tflaunch.operator")

ERROR_RETRY_SECONDS = 15.0
"""When the API failed during a reconcile, try again after this long."""

Emit = Callable[[Mapping[str, Any], reconcile.Event], None]

MULTIWORKERJOB = operated.MULTIWORKERJOB
TFJOB = operated.TFJOB


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one reconcile saw and did."""

    resource: dict[str, Any] | None
    """The MultiWorkerJob as read; None when it is gone."""
    plan: reconcile.Plan


def reconcile_once(
    cluster: Cluster,
    namespace: str,
    name: str,
    now: datetime.datetime | None = None,
    policy: tenancy.Allowlist | None = None,
) -> Outcome:
    """Observe one MultiWorkerJob and its children, decide, and carry the plan out.

    A child the API server refuses (422) fails the resource (reason Rejected) until its
    spec is edited: creating it again would fail the same way. A child whose name another
    object holds (a Service or NetworkPolicy not owned by this resource) is never adopted:
    Failed (reason NameConflict), tried again until that object is gone.

    Raises:
        ReconcileError: the API failed while carrying the plan out; nothing after the
            failed call was done, and a later reconcile picks up from what the cluster shows.
        ClusterError: the API failed while reading.
    """
    resource = cluster.get(MULTIWORKERJOB, name, namespace)
    if resource is None:
        return Outcome(None, reconcile.Plan())
    selector = labels.job_selector_string(name)
    observed = observe.Observed(
        resource=resource,
        jobs=cluster.list_objects("Job", namespace, selector),
        pods=cluster.list_objects("Pod", namespace, selector),
        now=now or datetime.datetime.now(datetime.timezone.utc),
        others=[
            *cluster.list_objects("Service", namespace, selector),
            *cluster.list_objects("NetworkPolicy", namespace, selector),
        ],
        policy=policy or tenancy.Allowlist(),
    )
    observed = dataclasses.replace(
        observed,
        blocked=_blocked(cluster, observed, namespace),
        pod_warnings=find.warnings_of(cluster, observe.creating_pods(observed), namespace),
        workloads=_workloads(cluster, observed, namespace),
    )
    chief = observe.chief_log_wanted(observed)
    if chief is not None:
        observed = dataclasses.replace(observed, chief_log=_chief_log(cluster, chief, namespace))
    elif chief := progress.log_wanted(observed, crd.status_from_document(resource.get("status"))):
        observed = dataclasses.replace(observed, chief_log=_progress_log(cluster, chief, namespace))
    plan = reconcile.decide(observed)
    try:
        for obj in plan.create:  # before the status is written: a taken name changes the plan
            _check_ours(cluster, obj, resource)
        execute(cluster, resource, plan)
    except Invalid as error:  # a child the API server refuses: retrying cannot help
        plan = reconcile.rejected(observed, str(error))
        execute(cluster, resource, plan)
    except NameTaken as error:  # never adopt it: Failed (NameConflict), no group restart
        plan = reconcile.name_taken(observed, error.taken)
        execute(cluster, resource, plan)
    except StaleRead:  # nothing was done; decide again from what is there now
        logger.info("%s/%s changed while deciding; reconciling again", namespace, name)
        return Outcome(resource, reconcile.Plan(requeue_after=STALE_RETRY_SECONDS))
    except ClusterError as error:
        raise ReconcileError(resource, error) from error
    return Outcome(resource, plan)


STALE_RETRY_SECONDS = 0.5
"""Decide again this soon when the resource changed under a reconcile."""


class StaleRead(Conflict):
    """The status write was refused (409): the MultiWorkerJob changed since it was read, so
    the decision was made on stale state and nothing of it was carried out."""


class NameTaken(Conflict):
    """Creating a child answered 409 and the object with its name is not this
    MultiWorkerJob's (e.g. someone's Service named like the job: the workers' DNS names would
    never resolve)."""

    def __init__(self, taken: str) -> None:
        super().__init__(f"{taken} already exists and does not belong to this MultiWorkerJob")
        self.taken = taken


class ReconcileError(ClusterError):
    """The API failed half-way through a plan; `resource` is what the reconcile read."""

    def __init__(self, resource: dict[str, Any], error: ClusterError) -> None:
        super().__init__(str(error))
        self.resource = resource


def _blocked(cluster: Cluster, observed: observe.Observed, namespace: str) -> dict[str, str]:
    """Per owned Job with fewer pods than it should run: why its pods cannot be created,
    from its Warning events ("" while none says why). Events that cannot be read leave the
    reason out; they never fail a reconcile."""
    jobs, pods = observe.owned(observed)
    live = [j for j in jobs if not j["metadata"].get("deletionTimestamp")]
    found: dict[str, str] = {}
    for short in stalls.missing_pods(live, pods):
        try:
            events = find.job_events(cluster, short.job, namespace)
        except ClusterError as error:
            logger.debug("%s/%s: cannot read its events: %s", namespace, short.job, error)
            events = []
        job = next(j for j in live if j["metadata"]["name"] == short.job)
        found[short.job] = stalls.creation_blocked_by(job, events) or ""
    return found


def _workloads(
    cluster: Cluster, observed: observe.Observed, namespace: str
) -> Sequence[Mapping[str, Any]] | None:
    """Kueue's Workloads of the Jobs it holds back, so that the status says why in Kueue's
    words, as `wait` does; read only while Kueue holds one. Unreadable: None, never a failed
    reconcile (the status then says only that the Jobs are queued)."""
    jobs, _ = observe.owned(observed)
    live = [j for j in jobs if not j["metadata"].get("deletionTimestamp")]
    if not admission.held(live):
        return None
    try:
        return find.workloads(cluster, live)
    except ClusterError as error:
        logger.debug("%s: cannot read Kueue's Workloads: %s", namespace, error)
        return None


def _chief_log(cluster: Cluster, pod: str, namespace: str) -> str | None:
    """The tail of the chief's log; None when it cannot be read for good (gone, forbidden,
    or the node cannot serve it: 400 "no logs found" once the kubelet lost it). Only an
    unavailable API server is worth a retry; a missing result must not block success."""
    try:
        return logs.pod_log_tail(cluster, pod, namespace, observe.LOG_TAIL_LINES)
    except TransientClusterError:
        raise
    except ClusterError as error:
        logger.warning("%s/%s: cannot read the result: %s", namespace, pod, error)
        return None


def _progress_log(cluster: Cluster, pod: str, namespace: str) -> str | None:
    """The tail of the chief's log for its progress; None when it cannot be read now (the
    progress is only informative: it never fails or delays a reconcile)."""
    try:
        return logs.pod_log_tail(cluster, pod, namespace, observe.LOG_TAIL_LINES)
    except ClusterError as error:
        logger.debug("%s/%s: cannot read the progress: %s", namespace, pod, error)
        return None


def execute(cluster: Cluster, resource: Mapping[str, Any], plan: reconcile.Plan) -> None:
    """Carry a plan out: status first, so that a crash half-way is picked up from it."""
    meta = resource["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    if plan.status is not None:
        try:  # based on what was read: a stale decision must not act (two replicas, a race)
            patch = {"status": status_patch(resource, plan.status)}
            if meta.get("resourceVersion"):  # the write is conditional: Conflict if changed
                patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
            cluster.merge_patch(MULTIWORKERJOB, name, namespace, patch, subresource="status")
        except Conflict as error:
            raise StaleRead(str(error)) from error
    for job in plan.delete_jobs:
        cluster.delete("Job", job, namespace, propagation="Foreground")
    for job, patch in plan.patch_jobs:
        cluster.merge_patch("Job", job, namespace, patch)
    for obj in plan.create:
        if obj["kind"] == "PodGroup":
            # Applied, not only created: Jobs recreated for an edited spec (workers) need
            # the PodGroup's minMember to follow, or the gang would never be complete.
            _check_ours(cluster, obj, resource)
            try:
                cluster.apply(obj)
            except NotFound as error:  # its CRD is missing: say so (retried until installed)
                raise apply.not_served(obj) from error
        elif apply.create_object(cluster, obj) is None:  # 409: created since; is it ours?
            _check_ours(cluster, obj, resource)
    if plan.delete_resource:
        cluster.delete(MULTIWORKERJOB, name, namespace, propagation="Background")


def _check_ours(cluster: Cluster, obj: Mapping[str, Any], resource: Mapping[str, Any]) -> None:
    """A child whose name was taken is fine when this MultiWorkerJob owns the object there
    (an earlier reconcile created it); otherwise raise `NameTaken`. Gone again since: the
    next reconcile creates it. Jobs too: a reconcile lists only the Jobs with the job's
    labels, so someone's unlabelled Job named `<name>-worker` shows only here."""
    meta = obj["metadata"]
    current = cluster.get(client.kind_key(obj), meta["name"], meta.get("namespace"))
    if current is None:
        return
    owners = reading.owner_references(current)
    if not any(o.get("uid") == resource["metadata"]["uid"] for o in owners):
        raise NameTaken(f"{obj['kind']} {meta['name']}")


def status_patch(resource: Mapping[str, Any], status: crd.Status) -> dict[str, Any]:
    """A merge patch that makes the status exactly `status` (nulls remove stale fields)."""
    new = crd.document_of(status)
    stale = set(resource.get("status") or {}) | STATUS_KEYS
    return {**{key: None for key in sorted(stale) if key not in new}, **new}


STATUS_KEYS = frozenset(f.metadata["key"] for f in dataclasses.fields(crd.Status))


class Recorder(Protocol):
    """What the controller reports to (`launcher.operator.metrics.OperatorMetrics`)."""

    def timing(self) -> contextlib.AbstractContextManager[None]: ...

    def reconciled(
        self,
        namespace: str,
        name: str,
        resource: Mapping[str, Any] | None,
        new_status: crd.Status | None,
        restarted_in_place: int = 0,
    ) -> None: ...


class Controller:
    """Runs reconciles on kopf's event loop: one at a time per resource, coalesced, requeued.

    Args:
        cluster: the API, through `launcher.cluster`.
        emit: posts an event on the resource (kopf.event in the operator; a list in tests).
        metrics: told how long each reconcile took and what it saw and wrote; None: nothing.
    """

    def __init__(
        self,
        cluster: Cluster,
        emit: Emit,
        metrics: Recorder | None = None,
        policy: tenancy.Allowlist | None = None,
    ) -> None:
        self.cluster = cluster
        self.policy = policy or tenancy.Allowlist()
        self.emit = emit
        self.metrics = metrics
        self._running: set[tuple[str, str]] = set()
        self._dirty: set[tuple[str, str]] = set()
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._errors: dict[tuple[str, str], str] = {}

    async def trigger(self, namespace: str, name: str) -> None:
        """Reconcile this MultiWorkerJob now, or once more after the running reconcile."""
        key = (namespace, name)
        if key in self._running:
            self._dirty.add(key)
            return
        self._running.add(key)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        delay: float | None = None
        try:
            while True:
                self._dirty.discard(key)
                delay = await self._reconcile(namespace, name)
                if key not in self._dirty:
                    break
        finally:
            self._running.discard(key)
        if delay is not None:
            self._timers[key] = asyncio.get_running_loop().call_later(
                delay, self._requeue, namespace, name
            )

    def _requeue(self, namespace: str, name: str) -> None:
        self._timers.pop((namespace, name), None)
        task = asyncio.ensure_future(self.trigger(namespace, name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reconcile(self, namespace: str, name: str) -> float | None:
        """One reconcile in a worker thread (the Kubernetes client blocks); the next delay."""
        key = (namespace, name)
        try:
            outcome = await asyncio.to_thread(self._timed_reconcile, namespace, name)
        except ReconcileError as error:
            logger.warning("%s/%s: %s; retrying in %.0fs", namespace, name, error,
                           ERROR_RETRY_SECONDS)  # fmt: skip
            if self._errors.get(key) != str(error):  # once, not every retry
                self._errors[key] = str(error)
                self.emit(error.resource, reconcile.Event("Warning", "ApiError", str(error)))
            return ERROR_RETRY_SECONDS
        except TflaunchError as error:
            logger.warning("%s/%s: %s; retrying in %.0fs", namespace, name, error,
                           ERROR_RETRY_SECONDS)  # fmt: skip
            return ERROR_RETRY_SECONDS
        except Exception:  # a bug must not stop the operator for every other job
            logger.exception("%s/%s: reconcile failed; retrying", namespace, name)
            return ERROR_RETRY_SECONDS
        self._errors.pop(key, None)
        if self.metrics is not None:
            in_place_events = [
                e for e in outcome.plan.events if e.reason == in_place.RESTARTED_IN_PLACE
            ]
            self.metrics.reconciled(
                namespace, name, outcome.resource, outcome.plan.status, len(in_place_events)
            )
        if outcome.resource is not None:
            for event in outcome.plan.events:
                self.emit(outcome.resource, event)
        return outcome.plan.requeue_after

    def _timed_reconcile(self, namespace: str, name: str) -> Outcome:
        timing = self.metrics.timing() if self.metrics is not None else contextlib.nullcontext()
        with timing:
            return reconcile_once(self.cluster, namespace, name, policy=self.policy)

    def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()


def owner_of(body: Mapping[str, Any]) -> str | None:
    """The MultiWorkerJob that controls a Job, by its ownerReference."""
    for reference in reading.owner_references(body):
        if reference.get("kind") == crd.KIND and reference.get("apiVersion") == crd.API_VERSION:
            return str(reference.get("name"))
    return None


def kopf_event(resource: Mapping[str, Any], event: reconcile.Event) -> None:
    """Post an event on the MultiWorkerJob through kopf's event poster."""
    kopf.event(
        kopf.Body(cast(Any, resource)), type=event.type, reason=event.reason, message=event.message
    )


def connection_info(cluster: Cluster) -> kopf.ConnectionInfo:
    """kopf's credentials: the same connection as `launcher.cluster`'s
    (`launcher.cluster.client.credentials`)."""
    c = credentials(cluster)
    return kopf.ConnectionInfo(
        server=c.server,
        ca_path=c.ca_path,
        insecure=c.insecure,
        scheme=c.scheme,
        token=c.token,
        certificate_path=c.certificate_path,
        private_key_path=c.private_key_path,
        username=c.username,
        password=c.password,
        default_namespace=c.namespace,
    )


def run(
    cluster: Cluster,
    namespaces: Sequence[str],
    *,
    clusterwide: bool,
    liveness: str | None,
    metrics: Recorder | None = None,
    elector: leader.Elector | None = None,
    policy: tenancy.Allowlist | None = None,
    tfjob_mode: str = "off",
) -> None:
    """Run the operator in the foreground (kopf's event loop) until it is stopped.

    Args:
        cluster: the API, from `launcher.cluster.client.connect()`.
        namespaces: serve the MultiWorkerJobs of these namespaces...
        clusterwide: ...or of every namespace.
        liveness: kopf's health endpoint URL (for the Deployment's livenessProbe), or None.
        metrics: where reconciles are reported (Prometheus, served by the caller), or None.
        elector: with more than one replica: kopf runs only while this replica holds the
            leader Lease (`launcher.operator.leader`); None runs at once.
        policy: what a MultiWorkerJob may ask the scheduler for (`launcher.operator.tenancy`);
            None: anything.
        tfjob_mode: which Kubeflow TFJobs it serves too (`launcher.operator.tfjobs.Serve`).

    Raises:
        LeadershipLost: the Lease could not be renewed; kopf was stopped first.
    """
    controller = Controller(cluster, kopf_event, metrics, policy)
    if tfjob_mode != "off":
        serve_tfjobs(cluster, "all" if tfjob_mode == "all" else "managed")
    kwargs: dict[str, Any] = {"clusterwide": True} if clusterwide else {"namespaces": namespaces}
    stop = threading.Event()
    if elector is not None:
        with leader.standby_health(liveness):
            elector.acquire()
        elector.keep(on_lost=stop.set)
    try:
        kopf.run(
            registry=registry,
            standalone=True,  # no kopf peering: the Lease decides who acts (leader.py says why)
            liveness_endpoint=liveness,
            memo=kopf.Memo(controller=controller, stop=stop),
            stop_flag=stop,  # kopf waits on it in a thread: `stop` below sets it at shutdown
            **kwargs,
        )
    finally:
        if elector is not None:
            elector.release()
    if elector is not None and elector.lost.is_set():
        raise LeadershipLost(
            f"lost the leader Lease {elector.namespace}/{elector.name}; exiting, to restart "
            "as a standby"
        )


class LeadershipLost(ClusterError):
    """Another replica may act now: this one stopped and must not go on."""


# --- kopf handlers --------------------------------------------------------------------------

registry = kopf.OperatorRegistry()
"""Only these handlers; `tflaunch operator` runs kopf with this registry."""


@kopf.on.login(registry=registry)
def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    return connection_info(memo.controller.cluster)


@kopf.on.startup(registry=registry)
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Least privilege: do not list CRDs and namespaces to discover resources at runtime.
    settings.scanning.disabled = True
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60


@kopf.on.event(crd.GROUP, crd.VERSION, crd.PLURAL, registry=registry)
async def multiworkerjob_changed(
    namespace: str | None, name: str, memo: kopf.Memo, **_: Any
) -> None:
    if namespace:  # always, for a namespaced resource
        await memo.controller.trigger(namespace, name)


@kopf.on.event(
    "batch", "v1", "jobs",
    labels={labels.MANAGED_BY: labels.MANAGED_BY_VALUE},
    when=lambda body, **_: owner_of(body) is not None,
    registry=registry,
)  # fmt: skip
async def job_changed(body: kopf.Body, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    owner = owner_of(body)
    if owner is not None and namespace:
        await memo.controller.trigger(namespace, owner)


def _owned_child_changed(kind: str) -> Callable[..., Any]:
    async def child_changed(
        body: kopf.Body, namespace: str | None, memo: kopf.Memo, **_: Any
    ) -> None:
        owner = owner_of(body)
        if owner is not None and namespace:  # e.g. deleted while the group runs: restore it
            await memo.controller.trigger(namespace, owner)

    child_changed.__name__ = child_changed.__qualname__ = f"{kind}_changed"
    return child_changed


for _group, _version, _plural in (("", "v1", "services"),
                                  ("networking.k8s.io", "v1", "networkpolicies")):  # fmt: skip
    kopf.on.event(
        _group, _version, _plural,
        labels={labels.MANAGED_BY: labels.MANAGED_BY_VALUE},
        when=lambda body, **_: owner_of(body) is not None,
        registry=registry,
    )(_owned_child_changed(_plural))  # fmt: skip


def serve_tfjobs(cluster: Cluster, serve: tfjobs.Serve) -> None:
    """Add the TFJob handlers to `registry` (`tflaunch operator --tfjobs`): a TFJob's event
    and its MultiWorkerJob's reconcile the TFJob (`launcher.operator.tfjob_edge`)."""
    runner = tfjob_edge.TFJobs(cluster, serve)

    @kopf.on.event(TFJOB.api_version.split("/")[0], "v1", TFJOB.plural, registry=registry)
    async def tfjob_changed(namespace: str | None, name: str, **_: Any) -> None:
        if namespace:
            await runner.trigger(namespace, name)

    @kopf.on.event(
        crd.GROUP, crd.VERSION, crd.PLURAL,
        when=lambda body, **_: tfjob.controller_of(body) is not None,
        registry=registry,
    )  # fmt: skip
    async def tfjob_child_changed(body: kopf.Body, namespace: str | None, **_: Any) -> None:
        owner = tfjob.controller_of(body)
        if owner is not None and namespace:
            await runner.trigger(namespace, owner)


@kopf.on.cleanup(registry=registry)
def stop(memo: kopf.Memo, **_: Any) -> None:
    memo.controller.stop()
    flag = getattr(memo, "stop", None)
    if flag is not None:  # else kopf's thread waiting on the stop flag holds the exit up
        flag.set()
