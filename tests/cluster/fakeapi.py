"""A small stateful Kubernetes API server over real HTTP, for the cluster tests.

Why not kmock's emulator: it stores every PATCH (dry-run ones included) and answers a
server-side apply of a missing object with 404 from inside its request handler, before any
user reaction can run; it also ignores label selectors and has no resourceVersions, 410s or
pod logs. Those are exactly the behaviours `launcher.cluster` depends on, so this server models
them (and only them): create/get/list/watch/apply/delete with `dryRun`, label selectors,
resourceVersions with expiry, foreground deletion through ownerReferences, a Job's immutable
pod template (422 with causes), pod logs (following included), and injected failures.

Tests change the world the way controllers would: `put()` an object (a pod, a Job's
status), append log lines, and the watches see it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import http.server
import itertools
import json
import re
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from typing import Any

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Resource:
    api_version: str
    kind: str
    plural: str
    namespaced: bool = True


RESOURCES = [
    Resource("batch/v1", "Job", "jobs"),
    Resource("v1", "Pod", "pods"),
    Resource("v1", "Service", "services"),
    Resource("v1", "ResourceQuota", "resourcequotas"),
    Resource("v1", "Event", "events"),
    Resource("v1", "Node", "nodes", namespaced=False),
    Resource("v1", "Namespace", "namespaces", namespaced=False),
    Resource("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
    Resource("discovery.k8s.io/v1", "EndpointSlice", "endpointslices"),
    Resource("kueue.x-k8s.io/v1beta2", "Workload", "workloads"),
]
_BY_PATH = {(r.api_version, r.plural): r for r in RESOURCES}
_BY_KIND = {r.kind: r for r in RESOURCES}

_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<namespace>[^/]+)(?=/))?"
    r"/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)


@dataclasses.dataclass
class Failure:
    """An injected error: the next `times` requests matching `method` and `path` get it."""

    method: str
    path: re.Pattern[str]
    status: int
    body: Obj
    times: int = 1_000_000
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    writes_only: bool = False
    """Only requests that would store something (no dryRun): a server that dies after every
    check passed."""


@dataclasses.dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any = None

    @property
    def dry_run(self) -> bool:
        return self.query.get("dryRun") == "All"

    @property
    def writes(self) -> bool:
        return self.method in ("POST", "PATCH", "PUT", "DELETE") and not self.dry_run


def status(code: int, reason: str, message: str, **details: Any) -> Obj:
    """A `Status` object as the API server sends with an error."""
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }


class FakeKubernetes:
    """The state and behaviour; `FakeKubernetes.serve()` runs it on a free localhost port."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.objects: dict[tuple[str, str | None, str], Obj] = {}
        self.events: list[tuple[int, str, str, Obj]] = []  # (rv, kind, type, object)
        self.oldest_version = 0
        """Watches from a resourceVersion below this get 410 Gone (history compacted)."""
        self.version = itertools.count(100)
        self.last_version = 99
        self.requests: list[Request] = []
        self.failures: list[Failure] = []
        self.logs: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self.logs_closed: set[tuple[str, str]] = set()
        self.logs_stalled: set[tuple[str, str]] = set()
        """The next log request of these pods goes silent after the lines it has."""
        self.namespaces: set[str] | None = None
        """When set, only these namespaces exist; others give 404 like the real server."""
        self.stopping = False
        self.epoch = 0
        """Bumped by `restart()`: watches opened in an older epoch end."""
        self.url = ""
        self._server: http.server.ThreadingHTTPServer | None = None

    # --- Test-side API -------------------------------------------------------------------

    @contextlib.contextmanager
    def serve(self) -> Iterator[FakeKubernetes]:
        fake = self

        class Handler(_Handler):
            api = fake

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.daemon = True
        thread.start()
        try:
            yield self
        finally:
            with self.lock:
                self.stopping = True
                self.lock.notify_all()
            server.shutdown()
            server.server_close()

    def put(self, obj: Obj) -> Obj:
        """Create or replace an object as a controller would (no validation)."""
        obj = copy.deepcopy(obj)
        resource = _BY_KIND[obj["kind"]]
        obj.setdefault("apiVersion", resource.api_version)
        meta = obj.setdefault("metadata", {})
        ns = meta.get("namespace") if resource.namespaced else None
        with self.lock:
            key = (resource.kind, ns, meta["name"])
            old = self.objects.get(key)
            self._stamp(obj, old)
            self.objects[key] = obj
            self._event(resource.kind, "MODIFIED" if old else "ADDED", obj)
        return obj

    def get(self, kind: str, name: str, namespace: str | None = "default") -> Obj | None:
        resource = _BY_KIND[kind]
        with self.lock:
            return self.objects.get((kind, namespace if resource.namespaced else None, name))

    def all(self, kind: str | None = None) -> list[Obj]:
        with self.lock:
            return [o for (k, _, _), o in self.objects.items() if kind in (None, k)]

    def remove(self, kind: str, name: str, namespace: str | None = "default") -> None:
        with self.lock:
            self._delete((kind, namespace, name))

    def compact(self) -> None:
        """Forget the event history: watches from an older resourceVersion get 410 Gone."""
        with self.lock:
            self.oldest_version = self.last_version + 1
            self.events.clear()

    def restart(self) -> None:
        """End every open watch (as an API server restart does) and forget the history, so
        watchers resuming from their last resourceVersion get 410 Gone and must list again."""
        with self.lock:
            self.compact()
            self.epoch += 1
            self.lock.notify_all()

    def fail(
        self,
        method: str,
        path: str,
        code: int,
        message: str,
        times: int = 1_000_000,
        headers: dict[str, str] | None = None,
        writes_only: bool = False,
        **details: Any,
    ) -> None:
        reason = {
            401: "Unauthorized",
            403: "Forbidden",
            404: "NotFound",
            409: "AlreadyExists",
            410: "Expired",
            422: "Invalid",
            429: "TooManyRequests",
            500: "InternalError",
            503: "ServiceUnavailable",
        }.get(code, "Unknown")
        self.failures.append(
            Failure(
                method.upper(),
                re.compile(path),
                code,
                status(code, reason, message, **details),
                times,
                headers or {},
                writes_only,
            )
        )

    def log(self, pod: str, *lines: str, namespace: str = "default", at: str | None = None) -> None:
        """Append lines to a pod's log (the kubelet's side)."""
        with self.lock:
            entries = self.logs.setdefault((namespace, pod), [])
            for line in lines:
                stamp = at or _now()
                entries.append((stamp, line))
            self.lock.notify_all()

    def stall_log(self, pod: str, namespace: str = "default") -> None:
        """The next log request of `pod` sends the lines there are, then nothing ever again
        while staying open: a connection that died without a reset (a node or proxy gone)."""
        with self.lock:
            self.logs_stalled.add((namespace, pod))

    def end_log(self, pod: str, namespace: str = "default") -> None:
        """The container exited: a followed log stream ends."""
        with self.lock:
            self.logs_closed.add((namespace, pod))
            self.lock.notify_all()

    def writes(self) -> list[Request]:
        return [r for r in self.requests if r.writes]

    # --- Internals (hold self.lock) ------------------------------------------------------

    def _stamp(self, obj: Obj, old: Obj | None) -> None:
        meta = obj["metadata"]
        version = next(self.version)
        self.last_version = version
        meta["resourceVersion"] = str(version)
        if old is None:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            meta.setdefault("generation", 1)
        else:
            for key in ("uid", "creationTimestamp"):
                meta[key] = old["metadata"][key]
            meta.setdefault("generation", old["metadata"].get("generation", 1))

    def _event(self, kind: str, event_type: str, obj: Obj) -> None:
        self.events.append(
            (int(obj["metadata"]["resourceVersion"]), kind, event_type, copy.deepcopy(obj))
        )
        self.lock.notify_all()

    def _delete(self, key: tuple[str, str | None, str]) -> None:
        obj = self.objects.pop(key, None)
        if obj is None:
            return
        uid = obj["metadata"]["uid"]
        for other_key, other in list(self.objects.items()):  # the garbage collector, at once
            owners = other["metadata"].get("ownerReferences") or []
            if any(o.get("uid") == uid for o in owners):
                self._delete(other_key)
        obj = copy.deepcopy(obj)
        version = next(self.version)
        self.last_version = version
        obj["metadata"]["resourceVersion"] = str(version)
        self._event(key[0], "DELETED", obj)


class _Handler(http.server.BaseHTTPRequestHandler):
    api: FakeKubernetes
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else each response waits ~40 ms for a delayed ACK

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # --- Plumbing ------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        request = Request(method, url.path, query, body)
        api = self.api
        with api.lock:
            api.requests.append(request)
            for failure in api.failures:
                if (
                    failure.times > 0
                    and failure.method == method
                    and failure.path.search(url.path)
                    and not (failure.writes_only and query.get("dryRun"))
                ):
                    failure.times -= 1
                    self._send(failure.status, failure.body, failure.headers)
                    return
        match = _PATH.match(url.path)
        resource = None
        if match:
            api_version = "v1" if match["core"] else f"{match['group']}/{match['version']}"
            resource = _BY_PATH.get((api_version, match["plural"]))
        if match is None or resource is None:
            self._send(404, status(404, "NotFound", f"the server could not find {url.path}"))
            return
        ns, name, sub = match["namespace"], match["name"], match["sub"]
        if api.namespaces is not None and ns is not None and ns not in api.namespaces:
            self._send(
                404,
                status(404, "NotFound", f'namespaces "{ns}" not found', name=ns, kind="namespaces"),
            )
            return
        try:
            if method == "GET" and sub == "log":
                self._logs(ns or "", name or "", query)
            elif method == "GET" and query.get("watch") in ("true", "1"):
                self._watch(resource, ns, query)
            elif method == "GET" and name:
                self._read(resource, ns, name)
            elif method == "GET":
                self._list(resource, ns, query)
            elif method == "POST":
                self._create(resource, ns, body, request.dry_run)
            elif method == "PATCH" and name:
                self._apply(
                    resource, ns, name, body, request.dry_run, self.headers.get("Content-Type", "")
                )
            elif method == "DELETE" and name:
                self._remove(resource, ns, name, request.dry_run)
            else:
                self._send(405, status(405, "MethodNotAllowed", f"{method} {url.path}"))
        except BrokenPipeError:
            pass

    def _send(self, code: int, body: Obj, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        # The stream's end closes the connection: said up front, or the client pools the
        # socket and its next request on it (a PATCH, which urllib3 does not retry) fails
        # with RemoteDisconnected.
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # --- Verbs ---------------------------------------------------------------------------

    def _key(self, resource: Resource, ns: str | None, name: str) -> tuple[str, str | None, str]:
        return (resource.kind, ns if resource.namespaced else None, name)

    def _read(self, resource: Resource, ns: str | None, name: str) -> None:
        with self.api.lock:
            obj = self.api.objects.get(self._key(resource, ns, name))
            obj = copy.deepcopy(obj)
        if obj is None:
            self._not_found(resource, name)
        else:
            self._send(200, obj)

    def _not_found(self, resource: Resource, name: str) -> None:
        group = resource.api_version.rpartition("/")[0]
        plural = f"{resource.plural}.{group}" if group else resource.plural
        self._send(
            404,
            status(
                404, "NotFound", f'{plural} "{name}" not found', name=name, kind=resource.plural
            ),
        )

    def _matching(self, resource: Resource, ns: str | None, query: dict[str, str]) -> list[Obj]:
        selector = _selector(query.get("labelSelector", ""))
        fields = [pair.split("=", 1) for pair in query.get("fieldSelector", "").split(",") if pair]
        return [
            copy.deepcopy(obj)
            for (kind, obj_ns, _), obj in sorted(
                self.api.objects.items(), key=lambda kv: str(kv[0])
            )
            if kind == resource.kind
            and (ns is None or obj_ns == ns)
            and selector(obj["metadata"].get("labels") or {})
            and all(_field(obj, path) == value for path, value in fields)
        ]

    def _list(self, resource: Resource, ns: str | None, query: dict[str, str]) -> None:
        with self.api.lock:
            items = self._matching(resource, ns, query)
            version = self.api.last_version
        for item in items:  # a real list has no kind/apiVersion in its items
            item.pop("kind", None)
            item.pop("apiVersion", None)
        self._send(
            200,
            {
                "apiVersion": resource.api_version,
                "kind": f"{resource.kind}List",
                "metadata": {"resourceVersion": str(version)},
                "items": items,
            },
        )

    def _watch(self, resource: Resource, ns: str | None, query: dict[str, str]) -> None:
        api = self.api
        selector = _selector(query.get("labelSelector", ""))
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 30)
        since = int(query.get("resourceVersion") or 0)
        self._start_stream("application/json")
        with api.lock:
            epoch = api.epoch
            if since and since < api.oldest_version:
                gone = status(410, "Expired", f"too old resource version: {since}")
                self._chunk(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                self._end_stream()
                return
            if not since:  # no version: every current object first, as ADDED
                pending = [(api.last_version, "ADDED", o) for o in self._matching(resource, ns, {})]
                pending = [p for p in pending if selector(p[2]["metadata"].get("labels") or {})]
            else:
                pending = []
            cursor = since or api.last_version
        while True:
            for _, event_type, obj in pending:
                self._chunk(json.dumps({"type": event_type, "object": obj}).encode() + b"\n")
            with api.lock:
                while True:
                    fresh = [
                        (v, t, o)
                        for v, k, t, o in api.events
                        if v > cursor
                        and k == resource.kind
                        and (ns is None or o["metadata"].get("namespace") == ns)
                    ]
                    ended = api.stopping or api.epoch != epoch or time.monotonic() > deadline
                    if api.epoch != epoch:
                        fresh = []  # restarted: this stream's events are lost
                    if fresh or ended:
                        break
                    api.lock.wait(timeout=0.05)
                if not fresh and ended:
                    break
                cursor = max(v for v, _, _ in fresh)
                pending = [f for f in fresh if selector(f[2]["metadata"].get("labels") or {})]
        self._end_stream()

    def _create(self, resource: Resource, ns: str | None, body: Obj, dry_run: bool) -> None:
        api = self.api
        meta = body.setdefault("metadata", {})
        if resource.namespaced:
            meta["namespace"] = ns
        key = self._key(resource, ns, meta["name"])
        with api.lock:
            if key in api.objects:
                self._send(
                    409,
                    status(
                        409, "AlreadyExists", f'{resource.plural} "{meta["name"]}" already exists'
                    ),
                )
                return
            obj = copy.deepcopy(body)
            obj.setdefault("apiVersion", resource.api_version)
            obj.setdefault("kind", resource.kind)
            api._stamp(obj, None)
            if not dry_run:
                api.objects[key] = obj
                api._event(resource.kind, "ADDED", obj)
        self._send(201, obj)

    def _apply(
        self,
        resource: Resource,
        ns: str | None,
        name: str,
        body: Obj,
        dry_run: bool,
        content_type: str,
    ) -> None:
        api = self.api
        if "merge-patch" in content_type:
            self._merge(resource, ns, name, body, dry_run)
            return
        if "apply-patch" not in content_type or not self._query_has("fieldManager"):
            self._send(400, status(400, "BadRequest", "only server-side apply is served"))
            return
        key = self._key(resource, ns, name)
        with api.lock:
            old = api.objects.get(key)
            new = copy.deepcopy(body)
            new["metadata"]["namespace"] = ns
            if old is not None:
                causes = _immutable(resource, old, new)
                if causes:
                    self._send(
                        422,
                        status(
                            422,
                            "Invalid",
                            f'{resource.kind}.batch "{name}" is invalid: '
                            + "; ".join(f"{c['field']}: {c['message']}" for c in causes),
                            name=name,
                            kind=resource.kind,
                            causes=causes,
                        ),
                    )
                    return
                for field in ("uid", "creationTimestamp", "resourceVersion", "generation"):
                    new["metadata"][field] = old["metadata"][field]
                if "status" in old:
                    new["status"] = old["status"]
                if new == old:  # a no-op apply changes nothing, not even the version
                    self._send(200, copy.deepcopy(old))
                    return
                if new.get("spec") != old.get("spec"):
                    new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            if dry_run:
                if old is None:
                    new["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=_now())
                    new["metadata"].update(generation=1, resourceVersion="")
                self._send(201 if old is None else 200, new)
                return
            api._stamp(new, old)
            api.objects[key] = new
            api._event(resource.kind, "MODIFIED" if old else "ADDED", new)
        self._send(201 if old is None else 200, new)

    def _merge(
        self, resource: Resource, ns: str | None, name: str, patch: Obj, dry_run: bool
    ) -> None:
        """A JSON merge patch (RFC 7386) of a stored object."""
        api = self.api
        key = self._key(resource, ns, name)
        with api.lock:
            old = api.objects.get(key)
            if old is None:
                self._not_found(resource, name)
                return
            new = _merged(old, patch)
            if not dry_run:
                api._stamp(new, old)
                api.objects[key] = new
                api._event(resource.kind, "MODIFIED", new)
        self._send(200, copy.deepcopy(new))

    def _query_has(self, name: str) -> bool:
        return name in urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)

    def _remove(self, resource: Resource, ns: str | None, name: str, dry_run: bool) -> None:
        key = self._key(resource, ns, name)
        with self.api.lock:
            obj = copy.deepcopy(self.api.objects.get(key))
            if obj is not None and not dry_run:
                self.api._delete(key)
        if obj is None:
            self._not_found(resource, name)
        else:
            self._send(200, status(200, "Success", "deleted") | {"status": "Success"})

    def _logs(self, ns: str, pod: str, query: dict[str, str]) -> None:
        api = self.api
        with api.lock:
            if ("Pod", ns, pod) not in api.objects:
                self._not_found(_BY_KIND["Pod"], pod)
                return
        follow = query.get("follow") == "true"
        stamps = query.get("timestamps") == "true"
        with api.lock:
            stalled = (ns, pod) in api.logs_stalled
            api.logs_stalled.discard((ns, pod))
        self._start_stream("text/plain")
        sent = 0
        while True:
            with api.lock:
                entries = list(api.logs.get((ns, pod), []))
                closed = (ns, pod) in api.logs_closed or ("Pod", ns, pod) not in api.objects
            for stamp, line in entries[sent:]:
                self._chunk(((f"{stamp} " if stamps else "") + line + "\n").encode())
            sent = len(entries)
            if api.stopping or (not follow and not stalled):
                break
            if stalled:  # silent, and open until the server stops
                while not api.stopping:
                    with api.lock:
                        api.lock.wait(timeout=0.05)
                break
            if closed:
                break
            with api.lock:
                api.lock.wait(timeout=0.05)
        self._end_stream()


def _field(obj: Obj, path: str) -> str:
    """A field selector's dotted path (`involvedObject.name`) in `obj`, as a string."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _merged(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merged(result.get(key), value)
    return result


def _immutable(resource: Resource, old: Obj, new: Obj) -> list[Obj]:
    if resource.kind != "Job":
        return []
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if old_spec.get("template") != new_spec.get("template"):
        return [
            {
                "reason": "FieldValueInvalid",
                "field": "spec.template",
                "message": "field is immutable",
            }
        ]
    return []


def _selector(text: str) -> Callable[[dict[str, str]], bool]:
    """Equality-based label selectors: `a=b,c!=d,e`."""
    terms = [t.strip() for t in text.split(",") if t.strip()]

    def matches(labels: dict[str, str]) -> bool:
        for term in terms:
            if "!=" in term:
                key, value = term.split("!=", 1)
                if labels.get(key) == value:
                    return False
            elif "=" in term:
                key, value = term.split("=", 1)
                if labels.get(key) != value.lstrip("="):
                    return False
            elif term not in labels:
                return False
        return True

    return matches


def _now() -> str:
    return datetime.datetime.now(tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
