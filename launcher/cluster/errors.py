"""How an API failure becomes the launcher error that says what failed and what to do.

Why a module of its own: the status codes and Status bodies of the API server are the
contract here, not the client library. kopf does the same (`kopf/_cogs/clients/errors.py`):
403, 404, 409, 422 and "cannot connect" each map to one launcher error (the classes are in
`launcher.core.errors`), worded with the fix (RBAC, namespace, quota, kubeconfig), so that
the CLI prints one line and the operator one event. `launcher.cluster.client` calls these
with the client's exception; they read only its `status`, `reason` and `body`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from launcher.core.errors import (
    ClusterError,
    ClusterUnreachable,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    Unavailable,
)

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
_REQUEST_PROBLEM_500 = ("failed to create typed patch object", "duplicate entries for key")
"""What server-side apply answers, as a 500, for an object it cannot merge (two list items
with one key: a duplicate imagePullSecret, two mounts at one path): the request's fault."""
"""Answers that say the server cannot serve now, not that the request is wrong."""


class ApiError(Protocol):
    """What an API failure carries (the client's `ApiException` has it)."""

    status: Any
    reason: Any
    body: Any


def one_line(text: str) -> str:
    return " ".join(text.split())


_FORBIDDEN = re.compile(
    r'cannot (?P<verb>[\w-]+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?(?: in the namespace "(?P<namespace>[^"]+)")?'
)


def translate(
    error: ApiError,
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
    message = one_line(str(body.get("message") or error.reason or ""))
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
    elif status == 500 and any(sign in message for sign in _REQUEST_PROBLEM_500):
        result = Invalid(
            f"the API server could not {verb} {what}{where}: {message} (500, but a problem "
            "with the object sent, not with the server: retrying cannot help)"
        )
    elif status in TRANSIENT_STATUSES:
        result = Unavailable(
            f"{verb} {resource}{where}: the API server answered {status} "
            f"{error.reason or ''}: {message}".rstrip(": ")
            + "; it may be restarting or overloaded, try again shortly",
            short=f"{status} {error.reason or ''}".strip(),
            retry_after=_retry_after(error),
        )
    elif status == 400:  # a malformed request, e.g. a label selector: the caller's input
        result = Invalid(f"the API server refused to {verb} {resource}{where}: {message} (400)")
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


def _retry_after(error: ApiError) -> float | None:
    """The Retry-After header in seconds (the API server sends whole seconds)."""
    headers = getattr(error, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _status_body(error: ApiError) -> dict[str, Any]:
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
    text = one_line(str(reason))
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


def unreachable(server: str, reason: object) -> ClusterUnreachable:
    """The API server cannot be reached (refused, DNS, timeout, TLS)."""
    why = _why(reason)
    return ClusterUnreachable(
        f"cannot reach the Kubernetes API server at {server}: {why}; check "
        "the kubeconfig context (kubectl config current-context, or --context/--kubeconfig) "
        "and that the cluster is running",
        short=why,
    )
