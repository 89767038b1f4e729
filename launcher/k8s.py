"""The one module that talks to the Kubernetes API, so that nothing else has to.

Why one edge: every call goes through `Cluster`, which takes an injected `ApiClient` (tests
point it at a mock API server over real HTTP; `connect()` builds it from a kubeconfig or the
pod's service account, never at import time). Everything it returns is plain data (dicts
exactly as the API server sent them), and every failure leaves here as a `launcher.core.errors`
exception that says what went wrong and how to fix it, so the core stays pure and the CLI
only prints one line.

Layers, top to bottom:

- connecting: `connect()`;
- objects: `Cluster.get/list/apply/delete/watch/pod_log` for the kinds in `KINDS`;
- jobs: `Cluster.apply_job/delete_job/job_objects/watch_job/job_logs/...`, what the
  `tflaunch` commands (and the operator) need, selected by the job's labels.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import urllib3
import yaml
from kubernetes import client
from kubernetes import config as _config
from kubernetes.client.exceptions import ApiException

from launcher import crd
from launcher.core import labels, names
from launcher.core.errors import (
    ClusterError,
    ClusterUnreachable,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    SpecChanged,
    SpecError,
    WaitTimeout,
)

Obj = dict[str, Any]
"""A Kubernetes object as plain JSON data."""

FIELD_MANAGER = "tflaunch"
"""Server-side apply field manager of everything tflaunch applies."""
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 60.0
WATCH_SECONDS = 240
"""How long one watch request lasts server-side before it is renewed from its resourceVersion."""
CONTAINER = "trainer"
"""The worker container's name in the pod template."""

# --- Kinds ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Kind:
    """One resource type and the generated client methods that serve it."""

    kind: str
    api_version: str
    plural: str
    api: Callable[[client.ApiClient], Any]
    """The typed API class, e.g. `client.BatchV1Api`."""
    singular: str
    """The generated methods' infix: `read_namespaced_<singular>`."""
    namespaced: bool = True

    @property
    def resource(self) -> str:
        """The RBAC resource name, e.g. `jobs.batch` (kubectl auth can-i spelling)."""
        group = self.api_version.rpartition("/")[0]
        return f"{self.plural}.{group}" if group else self.plural


KINDS: dict[str, Kind] = {
    k.kind: k
    for k in (
        Kind("Job", "batch/v1", "jobs", client.BatchV1Api, "job"),
        Kind("Pod", "v1", "pods", client.CoreV1Api, "pod"),
        Kind("Service", "v1", "services", client.CoreV1Api, "service"),
        Kind(
            "NetworkPolicy",
            "networking.k8s.io/v1",
            "networkpolicies",
            client.NetworkingV1Api,
            "network_policy",
        ),
        Kind(
            "EndpointSlice",
            "discovery.k8s.io/v1",
            "endpointslices",
            client.DiscoveryV1Api,
            "endpoint_slice",
        ),
        Kind("ResourceQuota", "v1", "resourcequotas", client.CoreV1Api, "resource_quota"),
        Kind("Node", "v1", "nodes", client.CoreV1Api, "node", namespaced=False),
        Kind("Namespace", "v1", "namespaces", client.CoreV1Api, "namespace", namespaced=False),
    )
}
JOB_KINDS = ("Job", "Service", "NetworkPolicy", "Pod")
"""Everything a tflaunch job consists of, found by its labels (pods by their template's)."""


def kind_of(kind: str) -> Kind:
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"tflaunch does not handle {kind} objects") from None


# --- Connecting ----------------------------------------------------------------------------

config: Any = _config  # its loaders are untyped
_SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def connect(kubeconfig: str | None = None, context: str | None = None) -> Cluster:
    """A `Cluster` for a kubeconfig context, by kubectl's rules, or the pod's service account.

    Args:
        kubeconfig: path of a kubeconfig; default `$KUBECONFIG` or `~/.kube/config`.
        context: kubeconfig context; default its current context.

    Raises:
        SpecError: the kubeconfig or the context cannot be used (names the flag and the fix).
    """
    configuration = client.Configuration()
    paths = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    found = any(Path(p).expanduser().exists() for p in paths.split(os.pathsep) if p)
    if kubeconfig is None and context is None and not found and _in_cluster():
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as error:
            raise SpecError("--kubeconfig", f"in-cluster configuration failed: {error}") from None
        namespace = _read_text(_SA_DIR / "namespace") or "default"
    else:
        if not found:
            raise SpecError(
                "--kubeconfig",
                f"no kubeconfig at {paths}; pass --kubeconfig PATH, set KUBECONFIG, "
                "or create one (e.g. kind create cluster)",
            )
        try:  # config_file None: $KUBECONFIG (several files merged, as kubectl does)
            config.load_kube_config(
                config_file=kubeconfig,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
            contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
        except (config.ConfigException, yaml.YAMLError, OSError, ValueError) as error:
            flag = "--context" if context else "--kubeconfig"
            hint = "see kubectl config get-contexts" if context else "check the file"
            raise SpecError(flag, f"{_one_line(str(error))}; {hint}") from None
        chosen = (
            next((c for c in contexts if c.get("name") == context), None) if context else current
        )
        namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    configuration.retries = 1  # say "unreachable" in seconds, not after urllib3's backoff
    return Cluster(client.ApiClient(configuration), namespace=namespace)


def _in_cluster() -> bool:
    return "KUBERNETES_SERVICE_HOST" in os.environ and (_SA_DIR / "token").exists()


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- Results -------------------------------------------------------------------------------


_Change = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    """One change seen by a watch. `RELISTED` carries the complete current list in `items`
    (after the first list, and again whenever the watch expired and was listed anew)."""

    type: Literal["RELISTED", "ADDED", "MODIFIED", "DELETED"]
    object: Obj | None = None
    items: tuple[Obj, ...] = ()


@dataclasses.dataclass(frozen=True)
class Applied:
    """What `apply_job` did to one object."""

    kind: str
    name: str
    action: Literal["created", "configured", "unchanged", "replaced"]


@dataclasses.dataclass(frozen=True)
class JobObjects:
    """Every object of one tflaunch job, as plain dicts, at one moment."""

    name: str
    namespace: str
    jobs: tuple[Obj, ...] = ()
    pods: tuple[Obj, ...] = ()
    services: tuple[Obj, ...] = ()
    network_policies: tuple[Obj, ...] = ()

    @property
    def exists(self) -> bool:
        return bool(self.jobs or self.pods or self.services or self.network_policies)

    def all(self) -> list[Obj]:
        return [*self.jobs, *self.services, *self.network_policies, *self.pods]


@dataclasses.dataclass(frozen=True)
class LogLine:
    """One line of a worker's log; `text` is None for the marker of a newly followed pod."""

    index: int | None
    pod: str
    text: str | None
    timestamp: str = ""


class Cancel:
    """Stops watches and log streams from another thread: sets a flag and shuts their open
    HTTP responses, which unblocks a read in progress."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._responses: set[Any] = set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        self._event.set()
        with self._lock:
            responses, self._responses = list(self._responses), set()
        for response in responses:
            with contextlib.suppress(Exception):
                response.shutdown()

    def wait(self, seconds: float) -> bool:
        return self._event.wait(seconds)

    @contextlib.contextmanager
    def tracking(self, response: Any) -> Iterator[None]:
        with self._lock:
            self._responses.add(response)
        if self._event.is_set():
            response.shutdown()
        try:
            yield
        finally:
            with self._lock:
                self._responses.discard(response)
            response.close()
            response.release_conn()


class _Gone(Exception):
    """A watch's resourceVersion expired (410): list again."""


# --- The cluster ---------------------------------------------------------------------------


class Cluster:
    """The Kubernetes API, as tflaunch uses it: plain dicts in and out, launcher errors.

    Args:
        api_client: a configured `kubernetes.client.ApiClient` (see `connect()`).
        namespace: the namespace used when a caller passes none (the context's).
    """

    def __init__(self, api_client: client.ApiClient, namespace: str = "default") -> None:
        self.api_client = api_client
        self.namespace = namespace
        self._apis: dict[Any, Any] = {}

    @property
    def server(self) -> str:
        """The API server's URL, for messages."""
        return str(self.api_client.configuration.host)

    def close(self) -> None:
        closing: Any = self.api_client
        closing.close()

    def _api(self, kind: Kind) -> Any:
        if kind.api not in self._apis:
            self._apis[kind.api] = kind.api(self.api_client)
        return self._apis[kind.api]

    def _method(self, kind: Kind, verb: str, all_namespaces: bool = False) -> Any:
        if not kind.namespaced:
            name = f"{verb}_{kind.singular}"
        elif all_namespaces:
            name = f"{verb}_{kind.singular}_for_all_namespaces"
        else:
            name = f"{verb}_namespaced_{kind.singular}"
        return getattr(self._api(kind), name)

    def _ns(self, namespace: str | None) -> str:
        return namespace or self.namespace

    # --- Objects ---------------------------------------------------------------------------

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        """One object, or None when it does not exist."""
        k = kind_of(kind)
        args = (name, self._ns(namespace)) if k.namespaced else (name,)
        try:
            with self._errors("get", k, self._ns(namespace), name):
                return _json(self._method(k, "read")(*args, **_plain_call()))
        except NotFound:
            return None

    def list_objects(
        self,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        *,
        all_namespaces: bool = False,
    ) -> list[Obj]:
        """Objects of a kind in a namespace (or in all, or cluster-scoped ones)."""
        return self._list(kind_of(kind), namespace, label_selector, all_namespaces)[0]

    def _list(
        self, k: Kind, namespace: str | None, selector: str | None, all_namespaces: bool = False
    ) -> tuple[list[Obj], str]:
        ns = None if all_namespaces or not k.namespaced else self._ns(namespace)
        kwargs: dict[str, Any] = {"label_selector": selector} if selector else {}
        with self._errors("list", k, ns):
            method = self._method(k, "list", all_namespaces=all_namespaces)
            args = (ns,) if ns is not None else ()
            data = _json(method(*args, **kwargs, **_plain_call()))
        items = list(data.get("items") or [])
        for item in items:  # list items carry no kind; give them one, like kubectl get -o json
            item.setdefault("apiVersion", k.api_version)
            item.setdefault("kind", k.kind)
        return items, str((data.get("metadata") or {}).get("resourceVersion") or "")

    def apply(self, obj: Obj, *, dry_run: bool = False, force: bool = True) -> Obj:
        """Server-side apply of one object (field manager `tflaunch`); returns the result.

        With `dry_run` the server validates, admits and computes the result but stores
        nothing: what a real apply would produce, or the error it would raise.
        """
        k = kind_of(obj["kind"])
        name = obj["metadata"]["name"]
        ns = self._ns(obj["metadata"].get("namespace"))
        args = (name, ns, obj) if k.namespaced else (name, obj)
        verb = "patch"
        with self._errors(verb, k, ns, name):
            return _json(
                self._method(k, "patch")(
                    *args,
                    field_manager=FIELD_MANAGER,
                    force=force,
                    dry_run="All" if dry_run else None,
                    _content_type="application/apply-patch+yaml",
                    **_plain_call(),
                )
            )

    def create_dry_run(self, obj: Obj) -> Obj | None:
        """Validate `obj` as a new object without storing it. None when the name is taken
        (the server validates before it looks the name up, so the object itself is valid)."""
        k = kind_of(obj["kind"])
        ns = self._ns(obj["metadata"].get("namespace"))
        args = (ns, obj) if k.namespaced else (obj,)
        try:
            with self._errors("create", k, ns, obj["metadata"]["name"]):
                return _json(
                    self._method(k, "create")(
                        *args, dry_run="All", field_manager=FIELD_MANAGER, **_plain_call()
                    )
                )
        except Conflict:
            return None

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        propagation: Literal["Foreground", "Background", "Orphan"] = "Foreground",
    ) -> bool:
        """Delete one object; False when it was already gone."""
        k = kind_of(kind)
        ns = self._ns(namespace)
        args = (name, ns) if k.namespaced else (name,)
        try:
            with self._errors("delete", k, ns, name):
                self._method(k, "delete")(
                    *args, propagation_policy=propagation, **_plain_call()
                ).release_conn()
        except NotFound:
            return False
        return True

    def watch(
        self,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        *,
        cancel: Cancel | None = None,
        all_namespaces: bool = False,
        server_timeout: int = WATCH_SECONDS,
    ) -> Iterator[WatchEvent]:
        """List, then watch from the list's resourceVersion, until cancelled.

        Yields a `RELISTED` event with every current object first, then each change. When
        the watch times out it resumes from the last resourceVersion seen (bookmarks keep it
        fresh); when that has expired (410 Gone) it lists again and yields `RELISTED`.
        """
        k = kind_of(kind)
        cancel = cancel or Cancel()
        version = ""
        gone = True
        failures = 0
        while not cancel.cancelled:
            if gone:
                items, version = self._list(k, namespace, label_selector, all_namespaces)
                yield WatchEvent("RELISTED", items=tuple(items))
                gone = False
            try:
                for event_type, obj in self._watch_once(
                    k, namespace, label_selector, version, server_timeout, cancel, all_namespaces
                ):
                    failures = 0
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if event_type in ("ADDED", "MODIFIED", "DELETED"):
                        obj.setdefault("apiVersion", k.api_version)
                        obj.setdefault("kind", k.kind)
                        yield WatchEvent(cast(_Change, event_type), object=obj)
            except _Gone:
                gone = True
            except ClusterUnreachable:
                if cancel.cancelled:
                    return
                failures += 1
                if failures > 3:
                    raise
                cancel.wait(0.5 * failures)

    def _watch_once(
        self,
        k: Kind,
        namespace: str | None,
        selector: str | None,
        version: str,
        server_timeout: int,
        cancel: Cancel,
        all_namespaces: bool,
    ) -> Iterator[tuple[str, Obj]]:
        ns = None if all_namespaces or not k.namespaced else self._ns(namespace)
        kwargs: dict[str, Any] = {"label_selector": selector} if selector else {}
        if version:
            kwargs["resource_version"] = version
        with self._errors("watch", k, ns):
            try:
                response = self._method(k, "list", all_namespaces)(
                    *((ns,) if ns is not None else ()),
                    watch=True,
                    allow_watch_bookmarks=True,
                    timeout_seconds=server_timeout,
                    _preload_content=False,
                    _request_timeout=(CONNECT_TIMEOUT, server_timeout + READ_TIMEOUT),
                    **kwargs,
                )
            except ApiException as error:
                if error.status == 410:
                    raise _Gone from error
                raise
        with cancel.tracking(response), self._errors("watch", k, ns):
            try:
                for line in _lines(response):
                    if not line:
                        continue
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        if obj.get("code") == 410:
                            raise _Gone
                        raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                    yield str(event.get("type")), obj
            except (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError):
                return  # the stream broke (or was cancelled): the caller resumes from its version

    def pod_log(
        self,
        name: str,
        namespace: str | None = None,
        *,
        container: str | None = CONTAINER,
        follow: bool = False,
        since_seconds: int | None = None,
        timestamps: bool = False,
        cancel: Cancel | None = None,
    ) -> Iterator[str]:
        """Lines of a pod's log; with `follow`, until the container ends or `cancel`."""
        k = KINDS["Pod"]
        ns = self._ns(namespace)
        cancel = cancel or Cancel()
        kwargs: dict[str, Any] = {
            "container": container,
            "follow": follow,
            "timestamps": timestamps,
        }
        if since_seconds is not None:
            kwargs["since_seconds"] = since_seconds
        if not follow:  # a followed log may stay quiet for as long as an epoch takes
            kwargs["_request_timeout"] = (CONNECT_TIMEOUT, READ_TIMEOUT)
        with self._errors("get", k, ns, name, resource="pods/log"):
            response = self._api(k).read_namespaced_pod_log(
                name, ns, _preload_content=False, **kwargs
            )
        with cancel.tracking(response), self._errors("get", k, ns, name, resource="pods/log"):
            try:
                yield from _lines(response)
            except (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError):
                return

    # --- Errors ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(
        self,
        verb: str,
        kind: Kind,
        namespace: str | None,
        name: str | None = None,
        *,
        resource: str | None = None,
    ) -> Iterator[None]:
        """Translate the client's exceptions into launcher errors, `raise ... from`."""
        try:
            yield
        except ApiException as error:
            if error.status == 0 or error.status is None:
                raise self._unreachable(error.reason or error) from error
            raise translate(
                error, verb, resource or kind.resource, kind.kind, namespace, name, self.server
            ) from error
        except urllib3.exceptions.HTTPError as error:
            raise self._unreachable(getattr(error, "reason", None) or error) from error

    def _unreachable(self, reason: object) -> ClusterUnreachable:
        return ClusterUnreachable(
            f"cannot reach the Kubernetes API server at {self.server}: {_why(reason)}; check "
            "the kubeconfig context (kubectl config current-context, or --context/--kubeconfig) "
            "and that the cluster is running"
        )

    # --- Jobs ------------------------------------------------------------------------------

    def apply_job(
        self,
        objects: Sequence[Obj],
        *,
        replace: bool = False,
        dry_run: bool = False,
        program: str = "tflaunch",
    ) -> list[Applied]:
        """Apply a job's rendered objects all-or-nothing; returns what happened to each.

        Every object is first checked against the server (a dry-run server-side apply, or a
        dry-run create under `replace`); only when all of them pass is anything written, so a
        refused change leaves the cluster as it was. An existing Job whose pod template would
        change is refused with `SpecChanged` (it is immutable). With `replace` the job's old
        objects are deleted first (foreground, waiting until they are gone). Objects that
        already match are not written at all, so applying the same spec twice is a no-op.
        Afterwards the Service and NetworkPolicy are owned by the (first) Job, so deleting the
        Job, or its TTL, removes them too.

        Args:
            objects: `render.render(job)`'s output: Service, NetworkPolicy, Job(s).
            replace: delete the job's existing objects, then create them anew.
            dry_run: run every check, report what would happen, change nothing.
            program: how the user calls tflaunch, for the hints in messages.
        """
        objects = [copy.deepcopy(o) for o in objects]
        replaced: set[tuple[str, str]] = set()
        job_name, namespace = _job_identity(objects)
        owner_name = _owner_name(objects, job_name)
        existing = {
            (o["kind"], o["metadata"]["name"]): self.get(
                o["kind"], o["metadata"]["name"], namespace
            )
            for o in objects
        }
        self._check_ownership(job_name, namespace, existing, program)
        if replace:
            for obj in objects:
                if existing[_key(obj)] is None:
                    self.apply(obj, dry_run=True)
                else:
                    self.create_dry_run(_for_create(obj))
            replaced = {key for key, obj in existing.items() if obj is not None}
            if dry_run:
                return [
                    Applied(*_key(o), "replaced" if _key(o) in replaced else "created")
                    for o in objects
                ]
            self.delete_job(job_name, namespace, wait=True)
            existing = dict.fromkeys(existing)
        owner = existing.get(("Job", owner_name))
        if owner is not None:
            _set_owner(objects, owner)
        results = self._dry_run_all(objects, existing, job_name, program)
        if dry_run:
            return [
                Applied(o["kind"], o["metadata"]["name"], a)
                for o, a in zip(objects, results, strict=True)
            ]
        applied: list[Applied] = []
        for obj, action in zip(objects, results, strict=True):
            if action != "unchanged":
                result = self.apply(obj)
                if obj["kind"] == "Job" and obj["metadata"]["name"] == owner_name:
                    owner = result
            if replace and _key(obj) in replaced:
                action = "replaced"
            applied.append(Applied(obj["kind"], obj["metadata"]["name"], action))
        if owner is not None:
            for obj in objects:
                if obj["kind"] != "Job" and not obj["metadata"].get("ownerReferences"):
                    _set_owner([obj], owner)
                    self.apply(obj)
        return applied

    def _check_ownership(
        self, job: str, namespace: str, existing: dict[tuple[str, str], Obj | None], program: str
    ) -> None:
        for (kind, name), obj in existing.items():
            if obj is None:
                continue
            owner = ((obj.get("metadata") or {}).get("labels") or {}).get(labels.JOB_NAME)
            if owner != job:
                whose = f"tflaunch job {owner}" if owner else "something other than tflaunch"
                raise Conflict(
                    f"{kind} {name} already exists in namespace {namespace} and belongs to "
                    f"{whose}; choose another job name (--name), or delete it "
                    f"(kubectl delete {kind.lower()} {name} -n {namespace})"
                )

    def _dry_run_all(
        self,
        objects: Sequence[Obj],
        existing: dict[tuple[str, str], Obj | None],
        job: str,
        program: str,
    ) -> list[Literal["created", "configured", "unchanged", "replaced"]]:
        actions: list[Literal["created", "configured", "unchanged", "replaced"]] = []
        changed_jobs: list[str] = []
        for obj in objects:
            current = existing[_key(obj)]
            try:
                result = self.apply(obj, dry_run=True)
            except Invalid as error:
                if current is not None and obj["kind"] == "Job":
                    why = str(error).partition(": ")[2] or str(error)
                    changed_jobs.append(f"{obj['metadata']['name']}: {why}")
                    continue
                raise
            if current is None:
                actions.append("created")
            elif _comparable(current) == _comparable(result):
                actions.append("unchanged")
            elif obj["kind"] == "Job" and _template(current) != _template(result):
                changed_jobs.append(obj["metadata"]["name"])
            else:
                actions.append("configured")
        if changed_jobs:
            ns = objects[0]["metadata"].get("namespace") or self.namespace
            raise SpecChanged(
                f"job {job} already exists in namespace {ns} with a different spec, and a "
                f"Job's pod template cannot change (Job {'; '.join(changed_jobs)}); nothing was "
                f"applied; delete it first ({program} delete {job} -n {ns}), or use --replace"
            )
        return actions

    def job_objects(self, name: str, namespace: str | None = None) -> JobObjects:
        """Every object of job `name` (Jobs, Pods, Service, NetworkPolicy) by its labels."""
        ns = self._ns(namespace)
        selector = labels.job_selector_string(name)
        return JobObjects(
            name,
            ns,
            jobs=tuple(self.list_objects("Job", ns, selector)),
            pods=tuple(self.list_objects("Pod", ns, selector)),
            services=tuple(self.list_objects("Service", ns, selector)),
            network_policies=tuple(self.list_objects("NetworkPolicy", ns, selector)),
        )

    def managed_jobs(
        self, namespace: str | None = None, *, all_namespaces: bool = False
    ) -> list[Obj]:
        """Every Job tflaunch manages in a namespace (or all); group them by `labels.JOB_NAME`."""
        return self.list_objects(
            "Job", namespace, labels.managed_selector_string(), all_namespaces=all_namespaces
        )

    def delete_job(
        self, name: str, namespace: str | None = None, *, wait: bool = True, timeout: float = 300
    ) -> list[str]:
        """Delete every object of job `name` with foreground propagation, so its pods go
        first; idempotent. Returns `kind/name` of everything that was there ([] for nothing;
        some may have been removed by the garbage collector along with their owner).

        Args:
            wait: return only once every object (and pod) is gone.
            timeout: how long to wait, in seconds.
        """
        ns = self._ns(namespace)
        found = self.job_objects(name, ns)
        deleted = []
        for obj in [*found.jobs, *found.services, *found.network_policies, *found.pods]:
            meta = obj["metadata"]
            deleted.append(f"{obj['kind'].lower()}/{meta['name']}")
            if not meta.get("deletionTimestamp"):
                self.delete(obj["kind"], meta["name"], ns)  # False: the GC was quicker
        if wait and found.exists:
            self.wait_gone(name, ns, timeout=timeout)
        return deleted

    def wait_gone(self, name: str, namespace: str | None = None, *, timeout: float = 300) -> None:
        """Watch until no object of job `name` is left. Raises WaitTimeout."""
        ns = self._ns(namespace)
        selector = labels.job_selector_string(name)
        deadline = time.monotonic() + timeout
        for kind in ("Job", "Pod", "Service", "NetworkPolicy"):
            left: set[str] = set()
            for item in self._watch_until(kind, ns, selector, deadline):
                if item.type == "RELISTED":
                    left = {o["metadata"]["name"] for o in item.items}
                elif item.type == "DELETED" and item.object is not None:
                    left.discard(item.object["metadata"]["name"])
                elif item.type == "ADDED" and item.object is not None:
                    left.add(item.object["metadata"]["name"])
                if not left:
                    break
            else:
                raise WaitTimeout(
                    f"{kind.lower()}s of job {name} still exist after {timeout:.0f}s: "
                    f"{', '.join(sorted(left))}; check their finalizers "
                    f"(kubectl get {kind.lower()} -n {ns} -l {selector} -o yaml)"
                )

    def _watch_until(
        self, kind: str, namespace: str, selector: str, deadline: float
    ) -> Iterator[WatchEvent]:
        """`watch` that ends (without error) when the monotonic `deadline` passes."""
        for item in self.watch_many([(kind, namespace, selector)], tick=0.5):
            if time.monotonic() > deadline:
                return
            if item is not None:
                yield item[1]

    def watch_many(
        self,
        streams: Sequence[tuple[str, str | None, str | None]],
        *,
        tick: float = 1.0,
        all_namespaces: bool = False,
    ) -> Iterator[tuple[int, WatchEvent] | None]:
        """Several watches at once: yields `(stream number, event)`, or None every `tick`
        seconds without events (so callers can check their deadlines). Each stream is a
        `(kind, namespace, label selector)`; each runs in its own thread, all end with the
        generator."""
        cancel = Cancel()
        events: queue.Queue[tuple[int, WatchEvent | BaseException]] = queue.Queue()

        def pump(number: int, kind: str, namespace: str | None, selector: str | None) -> None:
            try:
                for event in self.watch(
                    kind, namespace, selector, cancel=cancel, all_namespaces=all_namespaces
                ):
                    events.put((number, event))
            except BaseException as error:  # handed to the consumer, which raises it
                if not cancel.cancelled:
                    events.put((number, error))

        threads = [
            threading.Thread(target=pump, args=(n, *stream), daemon=True, name=f"watch-{stream[0]}")
            for n, stream in enumerate(streams)
        ]
        for thread in threads:
            thread.start()
        try:
            while True:
                try:
                    number, item = events.get(timeout=tick)
                except queue.Empty:
                    yield None
                    continue
                if isinstance(item, BaseException):
                    raise item
                yield number, item
        finally:
            cancel.cancel()

    def watch_job(
        self, name: str, namespace: str | None = None, *, tick: float = 1.0
    ) -> Iterator[JobObjects]:
        """The job's Jobs and Pods, anew after every change (and every `tick` seconds), from
        two watches. The first snapshot comes once both have listed."""
        ns = self._ns(namespace)
        selector = labels.job_selector_string(name)
        state: list[dict[str, Obj]] = [{}, {}]
        listed = [False, False]
        for item in self.watch_many([("Job", ns, selector), ("Pod", ns, selector)], tick=tick):
            if item is not None:
                number, event = item
                _update(state[number], event)
                listed[number] = listed[number] or event.type == "RELISTED"
            if all(listed):
                yield JobObjects(
                    name, ns, jobs=tuple(state[0].values()), pods=tuple(state[1].values())
                )

    def job_logs(
        self,
        name: str,
        namespace: str | None = None,
        *,
        worker: int | None = None,
        follow: bool = False,
        since_seconds: int | None = None,
        finished: Callable[[JobObjects], bool] = lambda _: False,
    ) -> Iterator[LogLine]:
        """Log lines of the job's workers (all, or one `worker` index).

        Without `follow`: every pod's log (old attempts included), in timestamp order.
        With `follow`: each pod's log as its container starts (a restarted worker's new pod
        included), until `finished(objects)` says the job is done and every stream ended.
        """
        ns = self._ns(namespace)
        if not follow:
            found = self.job_objects(name, ns)
            if not found.jobs and not found.pods:
                raise NotFound(f"job {name} not found in namespace {ns}")
            yield from self._logs_once(found.pods, ns, worker, since_seconds)
            return
        yield from self._follow_logs(name, ns, worker, since_seconds, finished)

    def _logs_once(
        self, pods: Iterable[Obj], namespace: str, worker: int | None, since: int | None
    ) -> Iterator[LogLine]:
        lines: list[LogLine] = []
        for pod in _sorted_pods(pods):
            index = _pod_index(pod)
            if (worker is not None and index != worker) or not _container_started(pod):
                continue
            pod_name = pod["metadata"]["name"]
            for raw in self.pod_log(pod_name, namespace, since_seconds=since, timestamps=True):
                stamp, _, text = raw.partition(" ")
                lines.append(LogLine(index, pod_name, text, stamp))
        lines.sort(key=lambda line: line.timestamp)  # stable: a pod's own order is kept
        yield from lines

    def _follow_logs(
        self,
        name: str,
        namespace: str,
        worker: int | None,
        since: int | None,
        finished: Callable[[JobObjects], bool],
    ) -> Iterator[LogLine]:
        lines: queue.Queue[LogLine | BaseException | str] = queue.Queue()
        cancel = Cancel()
        streaming: set[str] = set()
        running: set[str] = set()

        def pump(pod: str, index: int | None) -> None:
            try:
                for text in self.pod_log(
                    pod, namespace, follow=True, since_seconds=since, cancel=cancel
                ):
                    lines.put(LogLine(index, pod, text))
            except BaseException as error:
                if not cancel.cancelled:
                    lines.put(error)
            finally:
                lines.put(pod)  # this pod's stream ended

        def start(pods: Iterable[Obj]) -> Iterator[LogLine]:
            for pod in _sorted_pods(pods):
                pod_name = pod["metadata"]["name"]
                index = _pod_index(pod)
                if pod_name in streaming or not _container_started(pod):
                    continue
                if worker is not None and index != worker:
                    continue
                streaming.add(pod_name)
                running.add(pod_name)
                yield LogLine(index, pod_name, None)
                threading.Thread(target=pump, args=(pod_name, index), daemon=True).start()

        try:
            seen_job = rechecked = False
            for objects in self.watch_job(name, namespace, tick=0.2):
                seen_job = seen_job or bool(objects.jobs)
                yield from start(objects.pods)
                while True:
                    try:
                        item = lines.get_nowait()
                    except queue.Empty:
                        break
                    if isinstance(item, BaseException):
                        raise item
                    if isinstance(item, str):
                        running.discard(item)
                    else:
                        yield item
                if not objects.jobs and not objects.pods and not seen_job:
                    raise NotFound(f"job {name} not found in namespace {namespace}")
                if not running and (finished(objects) or (seen_job and not objects.jobs)):
                    if rechecked:
                        return
                    # The Pod watch may lag the Job's: list once more for pods not yet read.
                    rechecked = True
                    yield from start(self.list_objects("Pod", namespace, _selector(name)))
                    if not running:
                        return
        finally:
            cancel.cancel()

    def nodes(self) -> list[Obj]:
        return self.list_objects("Node")

    def resource_quotas(self, namespace: str | None = None) -> list[Obj]:
        return self.list_objects("ResourceQuota", namespace)

    def endpoint_slices(self, service: str, namespace: str | None = None) -> list[Obj]:
        """The EndpointSlices of a Service (selected by `kubernetes.io/service-name`)."""
        return self.list_objects(
            "EndpointSlice", namespace, f"kubernetes.io/service-name={service}"
        )


# --- Helpers (pure) ------------------------------------------------------------------------

_FORBIDDEN = re.compile(
    r'cannot (?P<verb>[\w-]+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?(?: in the namespace "(?P<namespace>[^"]+)")?'
)


def translate(
    error: ApiException,
    verb: str,
    resource: str,
    kind: str,
    namespace: str | None,
    name: str | None,
    server: str,
) -> ClusterError:
    """An API error as the launcher error that says what failed and what to do."""
    status = int(error.status or 0)
    body = _status_body(error)
    message = _one_line(str(body.get("message") or error.reason or ""))
    where = f" in namespace {namespace}" if namespace else ""
    what = f"{kind} {name}" if name else kind
    result: ClusterError
    if status == 401:
        result = Forbidden(
            f"the API server at {server} rejected the credentials (401 Unauthorized); log in "
            "again or check the user of the kubeconfig context"
        )
    elif status == 403 and "exceeded quota" in message:
        result = Forbidden(
            f"{message}; ask for more quota in namespace {namespace}, or request fewer "
            "workers or resources (tflaunch doctor shows the quota room)"
        )
    elif status == 403:
        match = _FORBIDDEN.search(message)
        if match:
            verb = match["verb"]
            resource = match["resource"] + (f".{match['group']}" if match["group"] else "")
            namespace = match["namespace"] or namespace
            where = f" in namespace {namespace}" if namespace else ""
        check = f"kubectl auth can-i {verb} {resource}" + (f" -n {namespace}" if namespace else "")
        result = Forbidden(
            f"cannot {verb} {resource}{where}: forbidden; ask your cluster admin for RBAC "
            f"permission to {verb} {resource}{where} (check with: {check})"
        )
    elif status == 404 and _is_namespace_missing(body, namespace):
        result = NotFound(
            f"namespace {namespace} does not exist; create it (kubectl create namespace "
            f"{namespace}) or choose another one (-n)"
        )
    elif status == 404:
        result = NotFound(f"{what} not found{where}")
    elif status == 409:
        result = Conflict(f"{what}{where}: {message or 'conflict'} (409)")
    elif status == 422:
        causes = (body.get("details") or {}).get("causes") or []
        fields = "; ".join(
            f"{c.get('field')}: {c.get('message')}" if c.get("field") else str(c.get("message"))
            for c in causes
        )
        result = Invalid(f"the API server rejected {what}{where}: {fields or message}")
    else:
        result = ClusterError(
            f"{verb} {resource}{where}: the API server answered {status} "
            f"{error.reason or ''}: {message}".rstrip(": ")
        )
    return result


def _status_body(error: ApiException) -> dict[str, Any]:
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _is_namespace_missing(body: dict[str, Any], namespace: str | None) -> bool:
    details = body.get("details") or {}
    return (
        bool(namespace) and details.get("kind") == "namespaces" and details.get("name") == namespace
    )


def _why(reason: object) -> str:
    text = _one_line(str(reason))
    lowered = text.lower()
    if "refused" in lowered:
        return "connection refused"
    if "resolve" in lowered or "name or service not known" in lowered or "nodename" in lowered:
        return "the host name does not resolve (DNS)"
    if "timed out" in lowered or "timeout" in lowered:
        return "the connection timed out"
    if "certificate" in lowered or "ssl" in lowered:
        return f"TLS failed ({text[:160]})"
    return text[:200]


def _plain_call() -> dict[str, Any]:
    """Keyword arguments for a call whose answer we parse ourselves: raw JSON, not models
    (plain dicts, exactly what the server sent, fields this client version does not know
    included), and a timeout instead of a hang."""
    return {"_preload_content": False, "_request_timeout": (CONNECT_TIMEOUT, READ_TIMEOUT)}


def _lines(response: Any) -> Iterator[str]:
    """Text lines of a streamed response, as they arrive (watch events, followed logs)."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line.decode("utf-8", errors="replace")
    if buffer:
        yield buffer.decode("utf-8", errors="replace")


def _json(response: Any) -> Obj:
    try:
        data = response.data
    finally:
        response.release_conn()
    parsed = json.loads(data) if data else {}
    return parsed if isinstance(parsed, dict) else {}


def _key(obj: Obj) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _job_identity(objects: Sequence[Obj]) -> tuple[str, str]:
    if not objects:
        raise ValueError("no objects to apply")
    meta = objects[0]["metadata"]
    job = (meta.get("labels") or {}).get(labels.JOB_NAME)
    if not job:
        raise ValueError(f"{objects[0]['kind']} {meta['name']} has no {labels.JOB_NAME} label")
    return str(job), str(meta.get("namespace") or "default")


def _owner_name(objects: Sequence[Obj], job: str) -> str:
    """The Job that owns the Service and NetworkPolicy: the indexed Job, or worker 0's."""
    jobs = [o["metadata"]["name"] for o in objects if o["kind"] == "Job"]
    if names.indexed_job_name(job) in jobs:
        return names.indexed_job_name(job)
    return names.per_worker_job_name(job, 0)


def _set_owner(objects: Iterable[Obj], owner: Obj) -> None:
    """Make the job's Service and NetworkPolicy dependents of `owner` (a Job), so that the
    garbage collector deletes them with it. Not a controller reference, and it does not block
    the owner's deletion (that would need RBAC on jobs/finalizers)."""
    reference = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": False,
        "blockOwnerDeletion": False,
    }
    for obj in objects:
        if obj["kind"] != "Job":
            obj["metadata"]["ownerReferences"] = [reference]


def _for_create(obj: Obj) -> Obj:
    result = copy.deepcopy(obj)
    result["metadata"].pop("ownerReferences", None)
    return result


_SERVER_FIELDS = ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid")


def _comparable(obj: Obj) -> Obj:
    """An object without what the server changes on its own (status, versions, timestamps)."""
    result = {k: v for k, v in obj.items() if k != "status"}
    result["metadata"] = {
        k: v for k, v in (obj.get("metadata") or {}).items() if k not in _SERVER_FIELDS
    }
    return result


def _template(job: Obj) -> Any:
    return (job.get("spec") or {}).get("template")


def _update(state: dict[str, Obj], event: WatchEvent) -> None:
    if event.type == "RELISTED":
        state.clear()
        state.update({o["metadata"]["name"]: o for o in event.items})
    elif event.object is not None:
        name = event.object["metadata"]["name"]
        if event.type == "DELETED":
            state.pop(name, None)
        else:
            state[name] = event.object


def _selector(job: str) -> str:
    return labels.job_selector_string(job)


def _pod_index(pod: Obj) -> int | None:
    meta = pod.get("metadata") or {}
    return labels.worker_index_of(meta.get("labels") or {}, meta.get("annotations") or {})


def _sorted_pods(pods: Iterable[Obj]) -> list[Obj]:
    return sorted(
        pods,
        key=lambda p: (
            p["metadata"].get("creationTimestamp") or "",
            p["metadata"]["name"],
        ),
    )


def _container_started(pod: Obj) -> bool:
    """Whether the trainer container has (or had) a log: running or terminated."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        if (
            state.get("running")
            or state.get("terminated")
            or status.get("lastState", {}).get("terminated")
        ):
            return True
    return False


# --- operator ------------------------------------------------------------------------------
# What `launcher.operator` needs beyond the methods above: the MultiWorkerJob custom resource
# (read, status subresource, delete), plain creates, merge patches and a log tail. Same rules:
# plain dicts in and out, every failure a launcher error.

MULTIWORKERJOB = Kind(
    crd.KIND, crd.API_VERSION, crd.PLURAL, client.CustomObjectsApi, "custom_object"
)
"""Not in KINDS: custom resources are served by CustomObjectsApi's generic methods."""
MERGE_PATCH = "application/merge-patch+json"


def _custom_objects(cluster: Cluster) -> Any:
    return cluster._api(MULTIWORKERJOB)


def get_multiworkerjob(cluster: Cluster, name: str, namespace: str) -> Obj | None:
    """A MultiWorkerJob, or None when it does not exist (any more)."""
    try:
        with cluster._errors("get", MULTIWORKERJOB, namespace, name):
            return _json(
                _custom_objects(cluster).get_namespaced_custom_object(
                    crd.GROUP, crd.VERSION, namespace, crd.PLURAL, name, **_plain_call()
                )
            )
    except NotFound:
        return None


def patch_multiworkerjob_status(cluster: Cluster, name: str, namespace: str, status: Obj) -> Obj:
    """Merge-patch the status subresource (a null removes a field)."""
    with cluster._errors(
        "patch", MULTIWORKERJOB, namespace, name, resource="multiworkerjobs/status"
    ):
        return _json(
            _custom_objects(cluster).patch_namespaced_custom_object_status(
                crd.GROUP, crd.VERSION, namespace, crd.PLURAL, name, {"status": status},
                _content_type=MERGE_PATCH, **_plain_call(),
            )
        )  # fmt: skip


def delete_multiworkerjob(cluster: Cluster, name: str, namespace: str) -> bool:
    """Delete a MultiWorkerJob (its children follow by garbage collection); False if gone."""
    try:
        with cluster._errors("delete", MULTIWORKERJOB, namespace, name):
            _custom_objects(cluster).delete_namespaced_custom_object(
                crd.GROUP, crd.VERSION, namespace, crd.PLURAL, name,
                propagation_policy="Background", **_plain_call(),
            ).release_conn()  # fmt: skip
    except NotFound:
        return False
    return True


def create_object(cluster: Cluster, obj: Obj) -> Obj | None:
    """Create one object as given (owner references included); None when the name is taken."""
    k = kind_of(obj["kind"])
    ns = cluster._ns(obj["metadata"].get("namespace"))
    args = (ns, obj) if k.namespaced else (obj,)
    try:
        with cluster._errors("create", k, ns, obj["metadata"]["name"]):
            return _json(
                cluster._method(k, "create")(*args, field_manager=FIELD_MANAGER, **_plain_call())
            )
    except Conflict:
        return None


def merge_patch(cluster: Cluster, kind: str, name: str, namespace: str, patch: Obj) -> Obj:
    """JSON merge patch (RFC 7386) of one object, e.g. a Job's spec.suspend."""
    k = kind_of(kind)
    with cluster._errors("patch", k, namespace, name):
        return _json(
            cluster._method(k, "patch")(
                name, namespace, patch, _content_type=MERGE_PATCH, **_plain_call()
            )
        )


def pod_log_tail(cluster: Cluster, name: str, namespace: str, lines: int) -> str | None:
    """The last `lines` lines of a pod's trainer log; None when the pod is gone."""
    k = KINDS["Pod"]
    try:
        with cluster._errors("get", k, namespace, name, resource="pods/log"):
            response = cluster._api(k).read_namespaced_pod_log(
                name, namespace, container=CONTAINER, tail_lines=lines, **_plain_call()
            )
            try:
                return bytes(response.data or b"").decode("utf-8", errors="replace")
            finally:
                response.release_conn()
    except NotFound:
        return None
