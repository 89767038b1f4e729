"""What the operator needs beyond the job verbs: a custom resource (read, status subresource,
delete), plain creates, merge patches and a log tail. Same rules as everywhere in the
package: plain dicts in and out, every failure a launcher error.

Custom resources are served by CustomObjectsApi's generic methods, so they are not in
`client.KINDS`: the caller names its resource with `client.custom_kind(...)` (the operator
passes the MultiWorkerJob's, from `launcher.operator.crd`).
"""

from __future__ import annotations

from launcher.cluster.client import KINDS, Cluster, kind_of
from launcher.cluster.kinds import Kind
from launcher.cluster.wire import CONTAINER, Obj, plain_call, read_json, tail_text
from launcher.core.errors import Conflict, NotFound

MERGE_PATCH = "application/merge-patch+json"


def _group_version(kind: Kind) -> tuple[str, str]:
    group, _, version = kind.api_version.partition("/")
    return group, version


def get_custom(cluster: Cluster, kind: Kind, name: str, namespace: str) -> Obj | None:
    """A custom resource, or None when it does not exist (any more)."""
    group, version = _group_version(kind)
    try:
        with cluster.errors("get", kind, namespace, name):
            return read_json(
                cluster.api(kind).get_namespaced_custom_object(
                    group, version, namespace, kind.plural, name, **plain_call()
                )
            )
    except NotFound:
        return None


def patch_custom_status(
    cluster: Cluster,
    kind: Kind,
    name: str,
    namespace: str,
    status: Obj,
    resource_version: str | None = None,
) -> Obj:
    """Merge-patch the status subresource (a null removes a field). With `resource_version`
    the write is conditional: `Conflict` when the resource changed since it was read."""
    group, version = _group_version(kind)
    body: Obj = {"status": status}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    with cluster.errors("patch", kind, namespace, name, resource=f"{kind.plural}/status"):
        return read_json(
            cluster.api(kind).patch_namespaced_custom_object_status(
                group, version, namespace, kind.plural, name, body,
                _content_type=MERGE_PATCH, **plain_call(),
            )
        )  # fmt: skip


def delete_custom(
    cluster: Cluster, kind: Kind, name: str, namespace: str, *, foreground: bool = False
) -> bool:
    """Delete a custom resource (its children follow by garbage collection; `foreground`: the
    resource stays until they are gone); False if it was gone already."""
    group, version = _group_version(kind)
    try:
        with cluster.errors("delete", kind, namespace, name):
            cluster.api(kind).delete_namespaced_custom_object(
                group, version, namespace, kind.plural, name,
                propagation_policy="Foreground" if foreground else "Background",
                **plain_call(),
            ).release_conn()  # fmt: skip
    except NotFound:
        return False
    return True


def create_object(cluster: Cluster, obj: Obj) -> Obj | None:
    """Create one object as given (owner references included); None when the name is taken."""
    try:
        return cluster.create(obj)
    except Conflict:
        return None


def merge_patch(cluster: Cluster, kind: str, name: str, namespace: str, patch: Obj) -> Obj:
    """JSON merge patch (RFC 7386) of one object, e.g. a Job's spec.suspend."""
    k = kind_of(kind)
    with cluster.errors("patch", k, namespace, name):
        return read_json(
            cluster.method(k, "patch")(
                name, namespace, patch, _content_type=MERGE_PATCH, **plain_call()
            )
        )


SHORT_TAIL_LINES = 5
"""When the last lines of a log are too big to read whole: how many are read instead (the
result line is the chief's last)."""


def pod_log_tail(cluster: Cluster, name: str, namespace: str, lines: int) -> str | None:
    """The last `lines` lines of a pod's trainer log, in bounded memory whatever the pod
    printed (`wire.tail_text`: long lines left out, the newest 1 MiB kept, at most 32 MiB
    read; when that was not the end, the last `SHORT_TAIL_LINES` are read instead); None
    when the pod is gone."""
    try:
        text, cut = _bounded_tail(cluster, name, namespace, lines)
        if cut and lines > SHORT_TAIL_LINES:
            text, _ = _bounded_tail(cluster, name, namespace, SHORT_TAIL_LINES)
    except NotFound:
        return None
    return text


def _bounded_tail(cluster: Cluster, name: str, namespace: str, lines: int) -> tuple[str, bool]:
    k = KINDS["Pod"]
    with cluster.errors("get", k, namespace, name, resource="pods/log"):
        response = cluster.api(k).read_namespaced_pod_log(
            name, namespace, container=CONTAINER, tail_lines=lines, **plain_call()
        )
        try:
            return tail_text(response.stream(64 * 1024, decode_content=True))
        finally:
            response.close()  # not drained: what was left unread is dropped with it
            response.release_conn()


def list_custom(
    cluster: Cluster, kind: Kind, namespace: str | None, *, all_namespaces: bool = False
) -> list[Obj]:
    """Every custom resource of `kind` in a namespace (or in all)."""
    group, version = _group_version(kind)
    ns = None if all_namespaces else cluster.ns(namespace)
    with cluster.errors("list", kind, ns):
        api = cluster.api(kind)
        if ns is None:
            data = read_json(
                api.list_cluster_custom_object(group, version, kind.plural, **plain_call())
            )
        else:
            data = read_json(
                api.list_namespaced_custom_object(group, version, ns, kind.plural, **plain_call())
            )
    items = list(data.get("items") or [])
    for item in items:
        item.setdefault("apiVersion", kind.api_version)
        item.setdefault("kind", kind.kind)
    return items


def apply_custom(cluster: Cluster, kind: Kind, obj: Obj, *, dry_run: bool = False) -> Obj:
    """Server-side apply of a custom resource (field manager `tflaunch`), like `Cluster.apply`."""
    name = obj["metadata"]["name"]
    ns = cluster.ns(obj["metadata"].get("namespace"))
    with cluster.errors("patch", kind, ns, name):
        return cluster.apply_raw(kind.api_version, kind.plural, name, ns, obj, dry_run=dry_run)
