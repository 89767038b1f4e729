"""The local side of `tflaunch tensorboard`'s port-forward: every connection to the local
port is bridged to its own stream to the pod, both ways, until either side closes. The pod
side is a plain local HTTP server here (the stream to a real pod is the Kubernetes client's
pods/portforward websocket; kwok cannot serve one, see tests/e2e/test_tensorboard.py)."""

from __future__ import annotations

import http.server
import socket
import threading
import urllib.request
from collections.abc import Iterator

import pytest

from launcher.cluster.portforward import Forwarder


class HelloHandler(http.server.BaseHTTPRequestHandler):
    """A server that answers every GET with its path and 200 KB (also the e2e TensorBoard
    stand-in)."""

    def do_GET(self) -> None:
        body = (f"hello from {self.path}" + "x" * 200_000).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def pod() -> Iterator[tuple[str, int]]:
    """Stands in for TensorBoard in the pod."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HelloHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[0], server.server_address[1]
    server.shutdown()


def test_every_local_connection_is_bridged_to_its_own_stream(pod):
    opened: list[socket.socket] = []

    def open_remote() -> socket.socket:
        opened.append(socket.create_connection(pod))
        return opened[-1]

    forwarder = Forwarder(open_remote, port=0).start()
    try:
        for path in ("/", "/data/runs"):
            with urllib.request.urlopen(forwarder.url.rstrip("/") + path, timeout=10) as response:
                body = response.read()
            assert body.startswith(f"hello from {path}".encode()) and len(body) > 200_000
    finally:
        forwarder.stop()
    assert len(opened) == 2
    assert forwarder.url.startswith("http://127.0.0.1:")


def test_a_stream_that_cannot_be_opened_fails_that_connection_only(pod):
    errors: list[str] = []
    attempts = iter([RuntimeError("pod gone"), None])

    def open_remote() -> socket.socket:
        failure = next(attempts)
        if failure is not None:
            raise failure
        return socket.create_connection(pod)

    forwarder = Forwarder(open_remote, on_error=errors.append).start()
    try:
        with pytest.raises(OSError):
            urllib.request.urlopen(forwarder.url, timeout=10).read()
        with urllib.request.urlopen(forwarder.url, timeout=10) as response:
            assert response.status == 200
    finally:
        forwarder.stop()
    assert errors == ["cannot reach the pod: pod gone"]


def test_a_taken_local_port_is_an_oserror_at_once():
    with socket.create_server(("127.0.0.1", 0)) as taken, pytest.raises(OSError):
        Forwarder(lambda: None, port=taken.getsockname()[1])
