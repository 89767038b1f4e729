"""A read-only image registry for the real node, as an air-gapped cluster has one: the OCI
distribution API's pull side (GET /v2/, HEAD/GET manifests by tag or digest, HEAD/GET blobs)
over OCI image layouts on this machine's disk, plus the containerd hosts.toml that makes it
the node's mirror for a registry (e.g. docker.io). Standard library only; it serves from a
thread of the test process, on 127.0.0.1 (containerd runs on the host).

Every request is recorded (method, path), so a test can tell that the kubelet's pull went
through the mirror.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"
_ROUTE = re.compile(r"^/v2/(?P<name>.+)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)$")


class Layout:
    """One OCI image layout directory (`buildah push IMAGE oci:DIR:TAG`): its tags, from
    index.json's ref.name annotations, and its blobs by digest."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        index = json.loads((directory / "index.json").read_text())
        self.tags: dict[str, dict[str, Any]] = {
            m["annotations"][REF_NAME]: m
            for m in index["manifests"]
            if REF_NAME in m.get("annotations", {})
        }

    def blob(self, digest: str) -> Path | None:
        algorithm, _, hexdigest = digest.partition(":")
        if algorithm != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", hexdigest):
            return None
        path = self.directory / "blobs" / algorithm / hexdigest
        return path if path.is_file() else None

    def manifest(self, reference: str) -> tuple[str, str] | None:
        """(digest, media type) of the manifest `reference` names: a tag or a digest."""
        if reference in self.tags:
            descriptor = self.tags[reference]
            return descriptor["digest"], descriptor["mediaType"]
        path = self.blob(reference)
        if path is None:
            return None
        media_type = json.loads(path.read_bytes()).get("mediaType", INDEX_MEDIA_TYPE)
        return reference, str(media_type)


class Registry:
    """Serves `repositories` (name, e.g. kubeflow/tf-multi-worker-strategy, to its layout)."""

    def __init__(self, repositories: dict[str, Path]) -> None:
        self.repositories = {name: Layout(path) for name, path in repositories.items()}
        self.requests: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def start(self) -> Registry:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def pulled(self, name: str) -> bool:
        """Whether a manifest of `name` was fetched (GET) through this registry."""
        prefix = f"/v2/{name}/manifests/"
        return any(m == "GET" and p.startswith(prefix) for m, p in self.requests)


def _handler(registry: Registry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: requests is the log
            pass

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _serve(self, body: bool) -> None:
            path = self.path.split("?", 1)[0]  # a mirror's request carries ?ns=docker.io
            registry.requests.append((self.command, path))
            if path in ("/v2", "/v2/"):
                self._reply(200, "application/json", b"{}", body=body)
                return
            route = _ROUTE.match(path)
            layout = registry.repositories.get(route["name"]) if route else None
            if route is None or layout is None:
                self._reply(404, "application/json", b'{"errors":[{"code":"NAME_UNKNOWN"}]}')
                return
            if route["kind"] == "manifests":
                found = layout.manifest(route["ref"])
                blob = layout.blob(found[0]) if found else None
                media_type = found[1] if found else ""
            else:
                blob = layout.blob(route["ref"])
                media_type = "application/octet-stream"
            if blob is None:
                self._reply(404, "application/json", b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
                return
            self.send_response(200)
            self.send_header("Content-Type", media_type)
            self.send_header("Content-Length", str(blob.stat().st_size))
            self.send_header("Docker-Content-Digest", f"sha256:{blob.name}")
            self.end_headers()
            if body:
                with blob.open("rb") as f:
                    shutil.copyfileobj(f, self.wfile, 1 << 20)

        def _reply(self, code: int, media_type: str, data: bytes, body: bool = True) -> None:
            self.send_response(code)
            self.send_header("Content-Type", media_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler


def hosts_toml(mirror: str, server: str) -> str:
    """containerd's hosts.toml for a registry whose `server` is unreachable here: pull and
    resolve from the plain-HTTP `mirror` (host:port) first, as an air-gapped cluster does."""
    return (
        f'server = "{server}"\n\n[host."http://{mirror}"]\n  capabilities = ["pull", "resolve"]\n'
    )


@contextmanager
def mirrored(
    certs_d: Path, registry_host: str, server: str, repositories: dict[str, Path]
) -> Iterator[Registry]:
    """A Registry of `repositories`, and containerd's `certs_d/registry_host/hosts.toml`
    naming it the mirror of `server`, for the duration; both gone after."""
    registry = Registry(repositories).start()
    directory = certs_d / registry_host
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hosts.toml").write_text(hosts_toml(registry.address, server))
    try:
        yield registry
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        registry.stop()
