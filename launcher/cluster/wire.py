"""Plain data on the wire: how every call to the API server asks for raw JSON and reads it.

Kept apart from `launcher.cluster.client` (the one module that imports the Kubernetes client)
because none of it needs the client: the generated methods are told not to build models
(`plain_call`), and their raw responses are read here, as the API server sent them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

Obj = dict[str, Any]
"""A Kubernetes object as plain JSON data."""

FIELD_MANAGER = "tflaunch"
"""Server-side apply field manager of everything tflaunch applies."""
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 60.0
WATCH_SECONDS = 240
"""How long one watch request lasts server-side before it is renewed from its resourceVersion."""
CONTAINER = "trainer"
"""The worker container's name in the pod template."""


class Gone(Exception):
    """A watch's resourceVersion expired (410): list again."""


def plain_call() -> dict[str, Any]:
    """Keyword arguments for a call whose answer we parse ourselves: raw JSON, not models
    (plain dicts, exactly what the server sent, fields this client version does not know
    included), and a timeout instead of a hang."""
    return {"_preload_content": False, "_request_timeout": (CONNECT_TIMEOUT, READ_TIMEOUT)}


def apply_body(obj: Obj) -> bytes:
    """A server-side apply body (`application/apply-patch+yaml`) as UTF-8 JSON.

    The client would json.dumps it with ASCII escapes, which write a character beyond the
    BMP (an emoji in a script, an env value) as a UTF-16 surrogate pair, `\\ud83d\\ude80`:
    valid JSON, but the API server reads this body as YAML, which refuses such an escape
    ("invalid Unicode character escape code"). Raw UTF-8 is valid in both.
    """
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def lines(response: Any) -> Iterator[str]:
    """Text lines of a streamed response, as they arrive (watch events, followed logs)."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line.decode("utf-8", errors="replace")
    if buffer:
        yield buffer.decode("utf-8", errors="replace")


def read_json(response: Any) -> Obj:
    """The JSON object a plain call answered (releasing the connection)."""
    try:
        data = response.data
    finally:
        response.release_conn()
    parsed = json.loads(data) if data else {}
    return parsed if isinstance(parsed, dict) else {}
