"""`Cluster.credentials()`: how the client reaches the API server, for the operator's kopf
watches, read from the same kubeconfig and context (no token lifted by the operator)."""

from __future__ import annotations

from pathlib import Path

from launcher.cluster.client import connect
from tests.cluster.conftest import write_kubeconfig


def test_the_credentials_are_the_kubeconfig_context_s(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "config", "https://api.example:6443", namespace="team-a")
    credentials = connect(str(path)).credentials()
    assert (credentials.server, credentials.namespace) == ("https://api.example:6443", "team-a")
    assert (credentials.scheme, credentials.token) == ("Bearer", "secret")
    assert credentials.certificate_path is None and credentials.username is None
