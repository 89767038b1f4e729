"""Bounds on text that comes from the cluster, where anyone who runs a pod or writes a label
chooses it: a log line, a termination message, a JSON document on a result line.

Why here, in one place: the operator reads such text for every tenant in one process, so one
tenant's 5 MB log lines or a result nested 100,000 deep (Python's json raises RecursionError)
must cost it its own result at most, never the operator's memory or its other reconciles.
Pure functions; the API edge (`launcher.cluster`) applies the byte limits while it reads.
"""

from __future__ import annotations

import json
from typing import Any

MAX_LINE_CHARS = 64 * 1024
"""A line longer than this is not a line tflaunch parses (the result and progress lines are
a few hundred characters)."""
MAX_JSON_DEPTH = 16
"""Deeper JSON is refused before it is parsed (the result line nests 2 deep)."""
MAX_MESSAGE_CHARS = 4096
"""What is kept of a termination message (the kubelet's own limit)."""


def json_object(text: str) -> dict[str, Any] | None:
    """The JSON object `text` holds; None when it is none, too long or too deep."""
    if len(text) > MAX_LINE_CHARS or nesting(text) > MAX_JSON_DEPTH:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def nesting(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (outside its strings); counting
    stops just past MAX_JSON_DEPTH."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                break
        elif char in "]}":
            depth -= 1
    return deepest


def cut(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text`, at most `limit` characters (the cut marked)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
