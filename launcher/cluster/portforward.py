"""A local TCP port bridged to a pod's port, like `kubectl port-forward`, without kubectl.

Each connection accepted on the local port gets its own stream to the pod (`open_remote`,
in practice `client.port_forward`: a websocket through the API server) and two threads
that copy bytes until either side closes. Nothing here imports the Kubernetes client, so
the bridge is tested with plain sockets.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Any

CHUNK = 65536
LOOPBACK = "127.0.0.1"


class Forwarder:
    """Listens on `host:port` (0: any free port) and bridges every connection.

    Args:
        open_remote: opens one stream to the pod; a socket-like object (recv/sendall/close).
        on_error: told about a connection that could not be bridged (one line).
    """

    def __init__(
        self,
        open_remote: Callable[[], Any],
        port: int = 0,
        host: str = LOOPBACK,
        on_error: Callable[[str], None] = lambda _message: None,
    ) -> None:
        self._open_remote = open_remote
        self._on_error = on_error
        self._listener = socket.create_server((host, port))
        self.host, self.port = self._listener.getsockname()[:2]
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def start(self) -> Forwarder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                local, _ = self._listener.accept()
            except OSError:
                return  # closed by stop()
            threading.Thread(target=self._bridge, args=(local,), daemon=True).start()

    def _bridge(self, local: socket.socket) -> None:
        try:
            remote = self._open_remote()
        except Exception as error:  # e.g. the pod is gone: this connection fails, not all
            self._on_error(f"cannot reach the pod: {error}")
            local.close()
            return
        done = threading.Event()
        for source, target in ((local, remote), (remote, local)):
            threading.Thread(target=_copy, args=(source, target, done), daemon=True).start()
        done.wait()
        for end in (local, remote):
            with contextlib.suppress(OSError):
                end.close()


def _copy(source: Any, target: Any, done: threading.Event) -> None:
    """Copy until `source` ends or either side fails; then end the whole bridge."""
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        done.set()
