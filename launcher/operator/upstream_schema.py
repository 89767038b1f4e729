"""Structural CRD schemas of upstream Kubernetes types (core/v1 Affinity), for the CRD.

A field of a custom resource that holds a Kubernetes type (spec.affinity) needs that type's
whole schema: `x-kubernetes-preserve-unknown-fields` would let the API server keep anything,
and a typo would surface only when the operator renders the Job. The schema comes from the
JSON schemas kubernetes-validate ships (the dev extra: only `make crd` and the tests run
this), converted to the structural OpenAPI v3 subset a CRD accepts: `$ref`s inlined, type
lists (`["object", "null"]`) reduced to their one type, `additionalProperties: false` and
descriptions dropped (the CRD stays small; `kubectl explain` on the Pod documents them).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

SCHEMA_VERSION = "v1.33.0"
"""The Kubernetes release whose schemas are used; fields newer than it are pruned."""

_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"


def structural(definition: str) -> dict[str, Any]:
    """The structural schema of one upstream definition, e.g. io.k8s.api.core.v1.Affinity."""
    package = importlib.import_module("kubernetes_validate")
    root = Path(str(package.__file__)).parent / "kubernetes-json-schema"
    path = root / f"{SCHEMA_VERSION}-local" / "_definitions.json"
    definitions = json.loads(path.read_text())["$defs"]
    schema: dict[str, Any] = _convert(definitions[definition], definitions, ())
    return schema


def _convert(node: dict[str, Any], definitions: dict[str, Any], seen: tuple[str, ...]) -> Any:
    ref = node.get("$ref")
    if ref is not None:
        name = str(ref).rpartition("/")[2]
        if name == _INT_OR_STRING:
            return {"x-kubernetes-int-or-string": True}
        if name in seen:  # a recursive type: no structural schema can spell it
            raise ValueError(f"recursive upstream type {name}")
        return _convert(definitions[name], definitions, (*seen, name))
    out: dict[str, Any] = {}
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind is not None:
        out["type"] = kind
    if node.get("format") in ("int32", "int64"):
        out["format"] = node["format"]
    if "enum" in node:
        out["enum"] = [v for v in node["enum"] if v is not None]
    if "properties" in node:
        out["properties"] = {
            key: _convert(value, definitions, seen)
            for key, value in sorted(node["properties"].items())
        }
    if node.get("required"):
        out["required"] = list(node["required"])
    if isinstance(node.get("items"), dict):
        out["items"] = _convert(node["items"], definitions, seen)
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _convert(node["additionalProperties"], definitions, seen)
    for key in ("x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type"):
        if key in node:
            out[key] = node[key]
    return out
