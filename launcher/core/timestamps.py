"""Kubernetes' RFC 3339 timestamps, read and written the same way by every part."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def parse_time(text: str | None) -> datetime.datetime | None:
    """An RFC 3339 timestamp from the API (`2024-05-01T12:00:00Z`), timezone-aware."""
    if not text:
        return None
    value = text.replace("Z", "+00:00")
    head, dot, rest = value.partition(".")
    if dot:  # Python 3.10 takes at most 6 fractional digits
        digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
        value = f"{head}.{digits[:6].ljust(6, '0')}{rest[len(digits) :]}"
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def format_time(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC, seconds precision, as Kubernetes writes it."""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def created_at(obj: Mapping[str, Any]) -> datetime.datetime | None:
    return parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
