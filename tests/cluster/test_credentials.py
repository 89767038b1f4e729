"""`credentials(cluster)`: how the client reaches the API server, for the operator's kopf
watches, read from the same kubeconfig and context (no token lifted by the operator)."""

from __future__ import annotations

from pathlib import Path

from launcher.cluster.client import connect, credentials
from tests.cluster.conftest import write_kubeconfig


def test_the_credentials_are_the_kubeconfig_context_s(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "config", "https://api.example:6443", namespace="team-a")
    found = credentials(connect(str(path)))
    assert (found.server, found.namespace) == ("https://api.example:6443", "team-a")
    assert (found.scheme, found.token) == ("Bearer", "secret")
    assert found.certificate_path is None and found.username is None
