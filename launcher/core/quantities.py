"""Kubernetes quantities ("500m", "2Gi", "1e3", 4) as numbers: one parser for the spec's
checks (`launcher.core.limits`) and for what `tflaunch doctor` reads from nodes."""

from __future__ import annotations

import decimal
import re
from typing import Any

_SUFFIX: dict[str, decimal.Decimal] = {
    "": decimal.Decimal(1),
    "m": decimal.Decimal("0.001"),
    **{s: decimal.Decimal(10) ** (3 * (i + 1)) for i, s in enumerate("kMGTPE")},
    **{f"{s}i": decimal.Decimal(2) ** (10 * (i + 1)) for i, s in enumerate("KMGTPE")},
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def quantity(value: Any) -> decimal.Decimal:
    """A Kubernetes quantity's value ("500m" -> 0.5, "2Gi" -> 2147483648); ValueError when
    `value` is not one."""
    match = _QUANTITY.fullmatch(str(value).strip())
    if not match or match[2] not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        return decimal.Decimal(match[1]) * _SUFFIX[match[2]]
    except decimal.InvalidOperation:
        raise ValueError(f"not a quantity: {value!r}") from None
