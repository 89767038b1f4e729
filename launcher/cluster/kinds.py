"""What a resource kind is to the API edge: its names and the generated methods that serve it.

Pure data and a forwarding adapter, kept apart from `launcher.cluster.client`: the table of
the kinds tflaunch handles (`client.KINDS`) is built there, since only that module imports the
Kubernetes client's API classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Kind:
    """One resource type and the generated client methods that serve it."""

    kind: str
    api_version: str
    plural: str
    api: Callable[[Any], Any]
    """The typed API class, e.g. `client.BatchV1Api`, called with the `ApiClient`."""
    singular: str
    """The generated methods' infix: `read_namespaced_<singular>`."""
    namespaced: bool = True

    @property
    def resource(self) -> str:
        """The RBAC resource name, e.g. `jobs.batch` (kubectl auth can-i spelling)."""
        group = self.api_version.rpartition("/")[0]
        return f"{self.plural}.{group}" if group else self.plural


class CustomObjects:
    """A CustomObjectsApi bound to one resource, its methods spelled like a typed API's
    (`read_namespaced_custom_object(name, namespace)`), so that `Cluster.method` and every
    verb on it serve a custom resource the way they serve a Job."""

    def __init__(self, api: Any, api_version: str, plural: str) -> None:
        self._api = api
        group, _, version = api_version.partition("/")
        self._where = (group, version)
        self._plural = plural

    def read_namespaced_custom_object(self, name: str, namespace: str, **kw: Any) -> Any:
        return self._api.get_namespaced_custom_object(
            *self._where, namespace, self._plural, name, **kw
        )

    def patch_namespaced_custom_object(
        self, name: str, namespace: str, body: Any, **kw: Any
    ) -> Any:
        return self._api.patch_namespaced_custom_object(
            *self._where, namespace, self._plural, name, body, **kw
        )

    def create_namespaced_custom_object(self, namespace: str, body: Any, **kw: Any) -> Any:
        return self._api.create_namespaced_custom_object(
            *self._where, namespace, self._plural, body, **kw
        )

    def list_namespaced_custom_object(self, namespace: str, **kw: Any) -> Any:
        return self._api.list_namespaced_custom_object(*self._where, namespace, self._plural, **kw)

    def delete_namespaced_custom_object(self, name: str, namespace: str, **kw: Any) -> Any:
        return self._api.delete_namespaced_custom_object(
            *self._where, namespace, self._plural, name, **kw
        )
