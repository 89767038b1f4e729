"""Plain data -> typed dataclasses: how a parsed spec document becomes a `MultiWorkerJob`.

Generic over the dataclasses in `launcher.api.spec`: each field's file key comes from its
metadata, its type from its hint (unions, literals, nested dataclasses, tuples, dicts). Any
mismatch is a `SpecError` naming the field's path and what was expected; an unknown key gets
a did-you-mean. The rules that relate fields to each other are in `load.validate`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from launcher.core.errors import SpecError, SpecErrors

T = TypeVar("T")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""What any integer field of the API can hold: the server wraps a larger one around
silently (2^63 is stored as -2^63), so no field takes more, whatever its own bound."""


def build(cls: type[T], data: Any, path: str) -> T:
    """Build dataclass `cls` from a mapping, rejecting unknown keys with a did-you-mean."""
    if not isinstance(data, Mapping):
        raise SpecError(path or "document", f"expected a mapping, got {_describe(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.metadata["key"]: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    errors: list[SpecError] = []  # every mistake of the document, said at once
    for key in data:
        if key not in fields:
            text = str(key) if str(key).isprintable() else repr(str(key))  # one line: "\n"
            errors.append(SpecError(_join(path, text), _unknown_key_hint(str(key), list(fields))))
    values: dict[str, Any] = {}
    for key, field in fields.items():
        where = _join(path, key)
        if key not in data:
            if (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            ):
                doc = str(field.metadata.get("doc") or "").rstrip(".")
                if doc[1:2].islower():  # "Always MultiWorkerJob" -> "always ...", not "CPU"
                    doc = doc[0].lower() + doc[1:]
                errors.append(
                    SpecError(where, f"is required; add it ({doc})" if doc else "is required")
                )
            continue
        try:
            values[field.name] = _convert(hints[field.name], data[key], where)
            _check_bounds(field.metadata.get("bounds") or {}, values[field.name], where)
        except SpecError as error:
            errors.append(error)
    if errors:
        raise SpecErrors.of(errors)
    return cls(**values)


def _check_bounds(bounds: Mapping[str, Any], value: Any, where: str) -> None:
    """A number's minimum and maximum, a string's maxLength, from its field's metadata (the
    CRD schema's too)."""
    longest = bounds.get("maxLength")
    if isinstance(value, str) and longest is not None and len(value) > longest:
        raise SpecError(where, f"is {len(value)} characters long, more than the {longest} allowed")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    low, high = bounds.get("minimum"), bounds.get("maximum")
    if low is not None and value < low:
        raise SpecError(where, f"must be at least {low}, got {value}")
    if high is not None and value > high:
        raise SpecError(where, f"must be at most {high}, got {value}")


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _convert(option, value, where)
            except SpecError as error:
                errors.append(error)
        raise errors[0]
    if origin is Literal:
        if value not in args:
            choices = ", ".join(str(a) for a in args)
            raise SpecError(where, f"must be one of {choices}, got {value!r}")
        return value
    if dataclasses.is_dataclass(hint):
        return build(hint, value, where)  # type: ignore[arg-type]
    if hint is bool:
        if not isinstance(value, bool):
            raise SpecError(where, f"expected true or false, got {_describe(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(where, f"expected an integer, got {_describe(value)}")
        if not INT64_MIN <= value <= INT64_MAX:
            raise SpecError(where, f"{int(value)} is out of range (at most {INT64_MAX})")
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(where, f"expected a number, got {_describe(value)}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise SpecError(where, f"expected a finite number, got {_describe(value)}")
        return number
    if hint is str:
        return _string(value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise SpecError(where, f"expected a list, got {_describe(value)}")
        return tuple(_convert(args[0], item, f"{where}[{i}]") for i, item in enumerate(value))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise SpecError(where, f"expected a mapping, got {_describe(value)}")
        return {
            unicode_text(str(k), where): _convert(args[1], v, _join(where, str(k)))
            for k, v in value.items()
        }
    if hint is Any:
        return _plain(value, where)
    raise TypeError(f"unsupported spec type {hint!r}")  # a bug in this module, not input


def _string(value: Any, where: str) -> str:
    """A string field takes a number as it was written (`3.10` stays "3.10", not "3.1")."""
    if isinstance(value, bool):
        raise SpecError(where, f"expected a string, got {_describe(value)}; quote it")
    if not isinstance(value, str | int | float):
        raise SpecError(where, f"expected a string, got {_describe(value)}")
    return unicode_text(str(getattr(value, "source", value)), where)


def unicode_text(text: str, where: str) -> str:
    """`text`, unless it holds a lone UTF-16 surrogate (YAML's "\\ud83d" escape without its
    pair): no UTF-8 can carry it to the API server or into a file."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = text[e.start : e.end].encode("unicode_escape").decode("ascii")
        raise SpecError(
            where, f"holds {bad}, half of a UTF-16 surrogate pair; write the character itself"
        ) from None
    return text


def _plain(value: Any, where: str) -> Any:
    """Untyped data (affinity) as plain JSON types: numbers lose their source text."""
    if isinstance(value, Mapping):
        return {
            unicode_text(str(k), where): _plain(v, _join(where, str(k))) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):
        return unicode_text(value, where)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    kind = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} {text}" if len(text) <= 40 else kind


def _unknown_key_hint(key: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if not close:
        close = [a for a in allowed if a.lower() == key.lower().replace("_", "").replace("-", "")]
    hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(sorted(allowed))}"
    return f"unknown key; {hint}"
