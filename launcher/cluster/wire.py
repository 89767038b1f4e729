"""Plain data on the wire: how every call to the API server asks for raw JSON and reads it.

Kept apart from `launcher.cluster.client` (the one module that imports the Kubernetes client)
because none of it needs the client: `Cluster.request` sends bodies as JSON and returns the
raw responses, which are read here, as the API server sent them (plain dicts, fields this
client version does not know included).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable, Iterator
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


def apply_body(obj: Obj) -> bytes:
    """A server-side apply body (`application/apply-patch+yaml`) as UTF-8 JSON.

    The client would json.dumps it with ASCII escapes, which write a character beyond the
    BMP (an emoji in a script, an env value) as a UTF-16 surrogate pair, `\\ud83d\\ude80`:
    valid JSON, but the API server reads this body as YAML, which refuses such an escape
    ("invalid Unicode character escape code"). Raw UTF-8 is valid in both.
    """
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


MAX_STREAM_LINE = 32 * 1024 * 1024
"""The longest line `lines` hands on (a watch event carries a whole object: etcd keeps at
most ~1.5 MiB, a request is at most 3 MiB); a longer one is cut, so that a pod that prints
gigabytes without a newline cannot take a reader's memory with it."""
LOG_TAIL_KEEP = 1024 * 1024
"""What `tail_text` keeps of a log tail: its last lines, at most this many bytes."""
LOG_TAIL_READ = 32 * 1024 * 1024
"""What `tail_text` reads at most (the API server has no byte limit for a log's *end*)."""
LOG_LINE_KEEP = 64 * 1024
"""A log line longer than this is left out of a tail (no line tflaunch parses is)."""


def lines(response: Any, max_line: int = MAX_STREAM_LINE) -> Iterator[str]:
    """Text lines of a streamed response, as they arrive (watch events, followed logs); a
    line longer than `max_line` bytes is cut there (the rest of it is dropped)."""
    buffer = b""
    skipping = False  # in the dropped rest of a cut line
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if skipping:
                skipping = False
                continue
            yield line[:max_line].decode("utf-8", errors="replace")
        if len(buffer) > max_line:
            if not skipping:
                yield buffer[:max_line].decode("utf-8", errors="replace")
            buffer, skipping = b"", True
    if buffer and not skipping:
        yield buffer.decode("utf-8", errors="replace")


def tail_text(
    chunks: Iterable[bytes],
    keep: int = LOG_TAIL_KEEP,
    max_line: int = LOG_LINE_KEEP,
    max_read: int = LOG_TAIL_READ,
) -> tuple[str, bool]:
    """The last lines of a log as it streams in, in bounded memory: lines longer than
    `max_line` bytes are left out, at most `keep` bytes of lines are kept (the newest), and
    reading stops after `max_read` bytes. Also whether it stopped there (the end unread)."""
    kept: collections.deque[bytes] = collections.deque()
    size = read = 0
    buffer = b""
    skipping = False
    for chunk in chunks:
        read += len(chunk)
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if skipping:
                skipping = False
                continue
            if len(line) > max_line:
                continue
            kept.append(line)
            size += len(line) + 1
            while size > keep:
                size -= len(kept.popleft()) + 1
        if len(buffer) > max_line:
            buffer, skipping = b"", True
        if read >= max_read:
            return b"\n".join(kept).decode("utf-8", errors="replace"), True
    if buffer and not skipping and len(buffer) <= max_line:
        kept.append(buffer)
    return b"\n".join(kept).decode("utf-8", errors="replace"), False


def read_json(response: Any) -> Obj:
    """The JSON object a plain call answered (releasing the connection)."""
    try:
        data = response.data
    finally:
        response.release_conn()
    parsed = json.loads(data) if data else {}
    return parsed if isinstance(parsed, dict) else {}
