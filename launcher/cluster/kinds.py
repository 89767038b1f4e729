"""What a resource kind is to the API edge: its names, which make its URL.

Pure data, kept apart from `launcher.cluster.client`, where the table of the kinds tflaunch
handles (`client.KINDS`) is built and every request is made.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Kind:
    """One resource type: a built-in kind or a custom resource."""

    kind: str
    api_version: str
    plural: str
    namespaced: bool = True

    @property
    def resource(self) -> str:
        """The RBAC resource name, e.g. `jobs.batch` (kubectl auth can-i spelling)."""
        group = self.api_version.rpartition("/")[0]
        return f"{self.plural}.{group}" if group else self.plural
