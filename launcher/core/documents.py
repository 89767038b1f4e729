"""Model instances <-> plain data (the dicts the API server and YAML files hold).

`document_of` writes any of the API's dataclasses under their camelCase keys;
`status_from_document` reads a MultiWorkerJob's status back leniently.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from launcher.api.status import Condition, Phase, ProgressStatus, Status
from launcher.core import progress as progress_lib


def document_of(value: Any) -> Any:
    """A model instance as plain data under its camelCase keys; None and empty fields omitted
    where leaving them out means the same: an empty field whose default is not empty is
    kept (`resources.requests: {}` is "no request", where an absent one is the default 1 CPU
    and 2Gi, as the CRD defaults it too)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = document_of(getattr(value, f.name))
            empty = item is None or (isinstance(item, dict | list) and not item)
            if empty and (item is None or not _default_document(f)):
                continue
            out[f.metadata["key"]] = item
        return out
    if isinstance(value, tuple | list):
        return [document_of(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): document_of(v) for k, v in value.items()}
    return value


def _default_document(field: dataclasses.Field[Any]) -> Any:
    """A field's default as plain data (None where it has none)."""
    if field.default_factory is not dataclasses.MISSING:
        return document_of(field.default_factory())
    return None if field.default is dataclasses.MISSING else document_of(field.default)


def status_from_document(document: Any) -> Status:
    """Read a resource's status leniently: a field that does not fit is left at its default.

    The status is the operator's own memory (restarts, start time); one hand-edited or
    older-format field must not stop the operator from reading the rest.
    """
    if not isinstance(document, Mapping):
        return Status()
    values: dict[str, Any] = {}
    for f in dataclasses.fields(Status):
        raw = document.get(f.metadata["key"])
        if raw is None:
            continue
        if f.name == "conditions":
            values[f.name] = tuple(_condition(c) for c in raw if isinstance(c, Mapping))
        elif f.name == "result":
            if isinstance(raw, Mapping):
                values[f.name] = dict(raw)
        elif f.name in (
            "workers_ready", "workers_total", "restarts", "observed_generation",
            "preemptions", "resumed_at_step",
        ):  # fmt: skip
            if isinstance(raw, int) and not isinstance(raw, bool):
                values[f.name] = raw
        elif f.name == "phase":
            if raw in typing.get_args(Phase):
                values[f.name] = raw
        elif f.name == "progress":
            values[f.name] = _progress(raw)
        elif isinstance(raw, str):
            values[f.name] = raw
    return Status(**values)


def _progress(raw: Any) -> ProgressStatus | None:
    """status.progress read leniently, like the rest of the status."""
    if not isinstance(raw, Mapping):
        return None
    values: dict[str, Any] = {}
    for f in dataclasses.fields(ProgressStatus):
        value = raw.get(f.metadata["key"])
        if f.type in ("int", int) and isinstance(value, int) and not isinstance(value, bool):
            values[f.name] = value
        elif "float" in str(f.type) and isinstance(value, int | float):
            values[f.name] = None if isinstance(value, bool) else float(value)
        elif "str" in str(f.type) and isinstance(value, str):
            values[f.name] = value
    return ProgressStatus(**values)


def _condition(raw: Mapping[str, Any]) -> Condition:
    status = raw.get("status")
    return Condition(
        type=str(raw.get("type", "")),
        status=status if status in ("True", "False") else "Unknown",
        reason=str(raw.get("reason") or ""),
        message=str(raw.get("message") or ""),
        last_transition_time=raw.get("lastTransitionTime"),
    )


def to_progress(status: ProgressStatus | None) -> progress_lib.Progress | None:
    """status.progress back as the core's Progress (for `tflaunch wait`/`status`)."""
    if status is None or status.epoch < 1 or status.epochs < 1:
        return None
    return progress_lib.Progress(
        status.epoch, status.epochs, status.step, status.steps, status.loss,
        status.images_per_sec, status.eta_seconds,
    )  # fmt: skip
