"""The one module that imports the Kubernetes client, so that nothing else has to.

Why one edge: every call goes through `Cluster`, which takes an injected `ApiClient` (tests
point it at a mock API server over real HTTP; `connect()` builds it from a kubeconfig or the
pod's service account, never at import time). Everything it returns is plain data (dicts
exactly as the API server sent them), and every failure leaves here as a `launcher.core.errors`
exception that says what went wrong and how to fix it (`launcher.cluster.errors` words it),
so the core stays pure and the CLI only prints one line.

`Cluster` is a thin handle: the API client, the default namespace, and the generic verbs
(`get`, `list_objects`, `apply`, `create_dry_run`, `delete`, one `watch_once` request) for
the kinds in `KINDS`. What tflaunch does with them lives beside it, as functions that take
the handle: `apply` (a job's objects, all or nothing), `watch` (list+watch, many streams,
wait until gone), `logs`, `find` (a job's objects by its labels) and `custom` (the
operator's custom resource and plain writes). What needs no client is kept apart: `wire`
(raw JSON in and out) and `kinds` (what a resource kind is).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import urllib3
import yaml
from kubernetes import client
from kubernetes import config as _config
from kubernetes.client.exceptions import ApiException

from launcher.cluster.cancel import Cancel
from launcher.cluster.errors import one_line, translate, unreachable
from launcher.cluster.kinds import Kind
from launcher.cluster.retry import Outage
from launcher.cluster.wire import (
    CONNECT_TIMEOUT,
    FIELD_MANAGER,
    READ_TIMEOUT,
    Gone,
    apply_body,
    lines,
    read_json,
)
from launcher.cluster.wire import Obj as Obj
from launcher.core.errors import Conflict, NotFound, SpecError

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"

# --- Kinds ---------------------------------------------------------------------------------

KINDS: dict[str, Kind] = {
    k.kind: k
    for k in (
        Kind("Job", "batch/v1", "jobs"),
        Kind("Pod", "v1", "pods"),
        Kind("Service", "v1", "services"),
        Kind("ConfigMap", "v1", "configmaps"),
        Kind("NetworkPolicy", "networking.k8s.io/v1", "networkpolicies"),
        Kind("EndpointSlice", "discovery.k8s.io/v1", "endpointslices"),
        Kind("ResourceQuota", "v1", "resourcequotas"),
        Kind("Event", "v1", "events"),
        Kind("Lease", "coordination.k8s.io/v1", "leases"),
        Kind("Node", "v1", "nodes", namespaced=False),
        Kind("Namespace", "v1", "namespaces", namespaced=False),
    )
}

# The gang schedulers' PodGroups (`launcher.core.gang`): two kinds of one name, so they are
# known by kind.group, as `kind_key` spells an object's kind; and Kueue's Workloads (read only,
# `launcher.core.admission`).
for _extra in (
    Kind("PodGroup", "scheduling.volcano.sh/v1beta1", "podgroups"),
    Kind("PodGroup", "scheduling.x-k8s.io/v1alpha1", "podgroups"),
    Kind("Workload", "kueue.x-k8s.io/v1beta2", "workloads"),
):
    KINDS[f"{_extra.kind}.{_extra.api_version.partition('/')[0]}"] = _extra


def kind_key(obj: Mapping[str, Any]) -> str:
    """How `kind_of` knows an object's kind: `Job`, or `PodGroup.<group>` for a custom one."""
    kind, api_version = str(obj["kind"]), str(obj.get("apiVersion") or "")
    known = KINDS.get(kind)
    if known is not None and known.api_version == api_version:
        return kind
    return f"{kind}.{api_version.partition('/')[0]}"


def kind_of(kind: str | Kind) -> Kind:
    """The kind named `kind` in KINDS (a `Kind` is itself: a custom resource's, say)."""
    if isinstance(kind, Kind):
        return kind
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"tflaunch does not handle {kind} objects") from None


# --- Connecting ----------------------------------------------------------------------------

config: Any = _config  # its loaders are untyped
_SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def connect(
    kubeconfig: str | None = None,
    context: str | None = None,
    notify: Callable[[str], None] | None = None,
) -> Cluster:
    """A `Cluster` for a kubeconfig context, by kubectl's rules, or the pod's service account.

    Args:
        kubeconfig: path of a kubeconfig; default `$KUBECONFIG` or `~/.kube/config`.
        context: kubeconfig context; default its current context.
        notify: receives the one-line notices of an API outage (see `Cluster`).

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
            raise SpecError(flag, f"{one_line(str(error))}; {hint}") from None
        chosen = (
            next((c for c in contexts if c.get("name") == context), None) if context else current
        )
        namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    configuration.retries = 1  # say "unreachable" in seconds, not after urllib3's backoff
    return Cluster(client.ApiClient(configuration), namespace=namespace, notify=notify)


def _in_cluster() -> bool:
    return "KUBERNETES_SERVICE_HOST" in os.environ and (_SA_DIR / "token").exists()


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


# --- The cluster ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Credentials:
    """Where the API server is and how to authenticate to it (`credentials(cluster)`)."""

    server: str
    ca_path: str | None
    insecure: bool
    scheme: str | None
    """The Authorization scheme (Bearer) of `token`."""
    token: str | None
    certificate_path: str | None
    private_key_path: str | None
    username: str | None
    password: str | None
    namespace: str


class Cluster:
    """The Kubernetes API, as tflaunch uses it: plain dicts in and out, launcher errors.

    A thin handle: the client, the default namespace and the generic verbs, every one of
    them one `request` (one path builder, one timeout). A kind is named by its KINDS key or
    given as a `Kind` (a custom resource's). The verbs on a whole job take the handle as
    their first argument (`apply.apply_job(cluster, objects)`).

    Args:
        api_client: a configured `kubernetes.client.ApiClient` (see `connect()`).
        namespace: the namespace used when a caller passes none (the context's).
        notify: where "the API server is unavailable since ..." goes (the CLI: stderr).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str = "default",
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.outage = Outage(self.server, notify or (lambda _message: None))
        """Shared by every stream of this handle: one message per outage."""
        self.error_observers: list[Callable[[int], None]] = []
        """Called with the HTTP status of every failed call (0: no answer), e.g. the
        operator's API-error metric."""

    @property
    def server(self) -> str:
        """The API server's URL, for messages."""
        return str(self.api_client.configuration.host)

    def close(self) -> None:
        closing: Any = self.api_client
        closing.close()

    def ns(self, namespace: str | None) -> str:
        """`namespace`, or the handle's default when None."""
        return namespace or self.namespace

    # --- The one request path --------------------------------------------------------------

    def request(
        self,
        method: str,
        k: Kind,
        namespace: str | None,
        name: str | None = None,
        *,
        subresource: str | None = None,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = JSON,
        read_timeout: float | None = READ_TIMEOUT,
    ) -> Any:
        """One call to the API server: the raw response, unread (`read_json` reads it,
        `wire.lines` streams it); a non-2xx answer raises `ApiException`. The body goes as
        the JSON (or bytes) it is, never through the client's typed models: since kubernetes
        37 those validate against pydantic models (`nvidia.com/gpu: 1` fails there although
        the API server takes it), and a model drops what this client version does not know.
        `read_timeout` None: no limit between bytes (a followed log)."""
        request = self.api_client.param_serialize(
            method=method,
            resource_path=resource_path(k, namespace, name, subresource),
            query_params=list(query),
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        answer: Any = self.api_client.call_api(
            *request, _request_timeout=(CONNECT_TIMEOUT, read_timeout)
        )
        if not 200 <= answer.status <= 299:
            answer.read()
            raise ApiException.from_response(http_resp=answer, body=None, data=None)
        return answer.response

    # --- Objects ---------------------------------------------------------------------------

    def get(self, kind: str | Kind, name: str, namespace: str | None = None) -> Obj | None:
        """One object, or None when it does not exist."""
        k = kind_of(kind)
        ns = self.ns(namespace)
        try:
            with self.errors("get", k, ns, name):
                return read_json(self.request("GET", k, ns, name))
        except NotFound:
            return None

    def list_objects(
        self,
        kind: str | Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        *,
        all_namespaces: bool = False,
        field_selector: str | None = None,
    ) -> list[Obj]:
        """Objects of a kind in a namespace (or in all, or cluster-scoped ones)."""
        k = kind_of(kind)
        return self.list_versioned(k, namespace, label_selector, all_namespaces, field_selector)[0]

    def list_versioned(
        self,
        k: Kind,
        namespace: str | None,
        selector: str | None,
        all_namespaces: bool = False,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], str]:
        """`list_objects`, and the list's resourceVersion (where a watch starts from)."""
        ns = None if all_namespaces else self.ns(namespace)
        with self.errors("list", k, ns if k.namespaced else None):
            data = read_json(self.request("GET", k, ns, query=_selectors(selector, field_selector)))
        items = list(data.get("items") or [])
        for item in items:  # list items carry no kind; give them one, like kubectl get -o json
            item.setdefault("apiVersion", k.api_version)
            item.setdefault("kind", k.kind)
        return items, str((data.get("metadata") or {}).get("resourceVersion") or "")

    def apply(
        self, obj: Obj, *, kind: Kind | None = None, dry_run: bool = False, force: bool = True
    ) -> Obj:
        """Server-side apply of one object (field manager `tflaunch`); returns the result.

        With `dry_run` the server validates, admits and computes the result but stores
        nothing: what a real apply would produce, or the error it would raise. The body is
        UTF-8 JSON (`wire.apply_body`: the client's own would write a character beyond the
        BMP as a surrogate pair, which the server's YAML decoder refuses).
        """
        k = kind or kind_of(kind_key(obj))
        name = obj["metadata"]["name"]
        ns = self.ns(obj["metadata"].get("namespace"))
        query = [("fieldManager", FIELD_MANAGER)] + [("force", "true")] * force
        query += [("dryRun", "All")] * dry_run
        with self.errors("patch", k, ns, name):
            return read_json(
                self.request("PATCH", k, ns, name, query=query, body=apply_body(obj),
                             content_type="application/apply-patch+yaml")
            )  # fmt: skip

    def create_dry_run(self, obj: Obj) -> Obj | None:
        """Validate `obj` as a new object without storing it. None when the name is taken
        (the server validates before it looks the name up, so the object itself is valid)."""
        try:
            return self.create(obj, dry_run=True)
        except Conflict:
            return None

    def create(self, obj: Obj, *, dry_run: bool = False) -> Obj:
        """Create one object exactly as given; `Conflict` when the name is taken."""
        k = kind_of(kind_key(obj))
        ns = self.ns(obj["metadata"].get("namespace"))
        query = [("fieldManager", FIELD_MANAGER)] + [("dryRun", "All")] * dry_run
        with self.errors("create", k, ns, obj["metadata"]["name"]):
            return read_json(self.request("POST", k, ns, query=query, body=obj))

    def replace(self, obj: Obj) -> Obj:
        """Write `obj` over the stored object (PUT; its resourceVersion makes the write
        conditional: `Conflict` when it changed since)."""
        k = kind_of(kind_key(obj))
        ns = self.ns(obj["metadata"].get("namespace"))
        name = obj["metadata"]["name"]
        query = [("fieldManager", FIELD_MANAGER)]
        with self.errors("update", k, ns, name):
            return read_json(self.request("PUT", k, ns, name, query=query, body=obj))

    def merge_patch(
        self,
        kind: str | Kind,
        name: str,
        namespace: str | None,
        patch: Obj,
        *,
        subresource: str | None = None,
    ) -> Obj:
        """JSON merge patch (RFC 7386: a null removes a field) of one object or one of its
        subresources (`status`)."""
        k = kind_of(kind)
        ns = self.ns(namespace)
        resource = f"{k.plural}/{subresource}" if subresource else None
        with self.errors("patch", k, ns, name, resource=resource):
            return read_json(
                self.request("PATCH", k, ns, name, subresource=subresource, body=patch,
                             content_type=MERGE_PATCH)
            )  # fmt: skip

    def delete(
        self,
        kind: str | Kind,
        name: str,
        namespace: str | None = None,
        *,
        propagation: Literal["Foreground", "Background", "Orphan"] = "Foreground",
    ) -> bool:
        """Delete one object; False when it was already gone."""
        k = kind_of(kind)
        ns = self.ns(namespace)
        try:
            with self.errors("delete", k, ns, name):
                self.request("DELETE", k, ns, name, query=[("propagationPolicy", propagation)])
        except NotFound:
            return False
        return True

    def watch_once(
        self,
        k: Kind,
        namespace: str | None,
        selector: str | None,
        version: str,
        server_timeout: int,
        cancel: Cancel,
        all_namespaces: bool,
    ) -> Iterator[tuple[str, Obj]]:
        """One watch request from `version`: `(event type, object)` until the server ends it
        or the stream breaks. Raises `Gone` when `version` has expired (list again);
        `launcher.cluster.watch.watch` renews it."""
        ns = None if all_namespaces else self.ns(namespace)
        shown = ns if k.namespaced else None
        query = [*_selectors(selector, None), ("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(server_timeout))]  # fmt: skip
        if version:
            query.append(("resourceVersion", version))
        with self.errors("watch", k, shown):
            try:
                response = self.request(
                    "GET", k, ns, query=query, read_timeout=server_timeout + READ_TIMEOUT
                )
            except ApiException as error:
                if error.status == 410:
                    raise Gone from error
                raise
        with cancel.tracking(response), self.errors("watch", k, shown):
            try:
                for line in lines(response):
                    if not line:
                        continue
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        if obj.get("code") == 410:
                            raise Gone
                        raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                    yield str(event.get("type")), obj
            except (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError):
                return  # the stream broke (or was cancelled): the caller resumes from its version

    # --- Errors ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def errors(
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
            self._observe_error(error.status or 0)
            if error.status == 0 or error.status is None:
                raise unreachable(self.server, error.reason or error) from error
            raise translate(
                error, verb, resource or kind.resource, kind.kind, namespace, name, self.server
            ) from error
        except urllib3.exceptions.HTTPError as error:
            self._observe_error(0)
            reason = getattr(error, "reason", None) or error
            raise unreachable(self.server, reason) from error

    def _observe_error(self, code: int) -> None:
        for observe in self.error_observers:
            observe(code)


def resource_path(
    k: Kind, namespace: str | None, name: str | None = None, subresource: str | None = None
) -> str:
    """`/apis/batch/v1/namespaces/NS/jobs/NAME/status`; a core kind's under `/api/v1`, a
    cluster-scoped kind's (or a list across namespaces: `namespace` None) without one."""
    group_version = f"/apis/{k.api_version}" if "/" in k.api_version else f"/api/{k.api_version}"
    where = f"/namespaces/{namespace}" if k.namespaced and namespace else ""
    path = f"{group_version}{where}/{k.plural}"
    if name:
        path += f"/{name}" + (f"/{subresource}" if subresource else "")
    return path


def _selectors(label: str | None, field: str | None) -> list[tuple[str, str]]:
    return [(key, value) for key, value in (("labelSelector", label),
                                            ("fieldSelector", field)) if value]  # fmt: skip


# --- Port-forward ------------------------------------------------------------------------


def credentials(cluster: Cluster) -> Credentials:
    """How this client reaches the API server, for another client of the same server
    (the operator's kopf watches): so that --kubeconfig/--context, or the pod's service
    account, hold there too. A rotating token (a service account's) is refreshed first."""
    configuration: Any = cluster.api_client.configuration
    if configuration.refresh_api_key_hook is not None:
        configuration.refresh_api_key_hook(configuration)
    header = next(
        (
            str(setting.get("value") or "")
            for setting in configuration.auth_settings().values()
            if str(setting.get("key", "")).lower() == "authorization"
            and str(setting.get("value") or "").lower().startswith("bearer ")
        ),
        "",
    )  # kubernetes>=29 keeps the token under api_key["BearerToken"], older ones differently
    scheme, _, token = header.partition(" ")
    return Credentials(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
        username=configuration.username or None,
        password=configuration.password or None,
        namespace=cluster.namespace,
    )


def port_forward(cluster: Cluster, pod: str, namespace: str | None, port: int) -> Any:
    """One connection to `port` of `pod` through the API server (pods/portforward, a
    websocket): a socket-like object; `launcher.cluster.portforward` bridges it to a local
    port."""
    from kubernetes.stream import portforward

    ns = cluster.ns(namespace)
    pods = kind_of("Pod")
    core = client.CoreV1Api(cluster.api_client)  # a websocket: the stream module's own call
    with cluster.errors("create", pods, ns, pod, resource="pods/portforward"):
        forward = portforward(core.connect_get_namespaced_pod_portforward, pod, ns, ports=str(port))
    return forward.socket(port)


# --- Responses -----------------------------------------------------------------------------


def stream_lines_or_cut(response: Any) -> Generator[str, None, bool]:
    """`wire.lines`; returns True when the stream broke or timed out (it was cut), False when
    the server ended it (a followed log: the container exited)."""
    try:
        yield from lines(response)
    except (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError):
        return True
    return False
