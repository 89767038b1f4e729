"""Validation of rendered objects against the upstream Kubernetes OpenAPI schemas.

kubernetes-validate is optional (the dev extra): `tflaunch validate` says so when it is
missing instead of pretending the objects were checked.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from launcher.core.errors import SpecError, TflaunchError
from launcher.core.gang import POD_GROUP_APIS


class SchemaUnavailable(TflaunchError):
    pass


def latest_kubernetes_version() -> str:
    kubernetes_validate = _import()
    return str(kubernetes_validate.latest_version())


def supported_versions() -> list[str]:
    """The Kubernetes minor versions whose schemas kubernetes-validate ships, oldest first."""
    kubernetes_validate = _import()
    minors = {
        kubernetes_validate.utils.major_minor(v) for v in kubernetes_validate.utils.all_versions()
    }
    return sorted(minors, key=lambda v: tuple(int(p) for p in v.split(".")))


def check_version(kubernetes_version: str) -> None:
    """Refuse a version without schemas in one line that lists the supported ones."""
    supported = supported_versions()
    minor = _import().utils.major_minor(kubernetes_version)
    if minor not in supported:
        raise SpecError(
            "--kubernetes-version",
            f"no schemas for Kubernetes {kubernetes_version}; supported: {', '.join(supported)}",
        )


def validate_objects(objects: Iterable[dict[str, Any]], kubernetes_version: str) -> None:
    """Validate every object strictly (unknown fields are errors); raise on the first failure."""
    kubernetes_validate = _import()
    check_version(kubernetes_version)
    for obj in objects:
        if obj["apiVersion"] in POD_GROUP_APIS.values():
            continue  # a gang scheduler's CRD, not Kubernetes': its API server checks it
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            kubernetes_validate.validate(obj, kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(p) for p in error.path) or "(object)"
            raise SpecError(where, f"{path}: {error.message}") from None
        except (
            kubernetes_validate.SchemaNotFoundError,
            kubernetes_validate.utils.VersionNotSupportedError,
        ) as error:
            raise SpecError(
                "--kubernetes-version",
                f"no schema for {where} at Kubernetes {kubernetes_version}: {error}",
            ) from None


def _import() -> Any:
    try:
        import kubernetes_validate
    except ImportError:
        raise SchemaUnavailable(
            "schema validation needs kubernetes-validate: pip install 'tflaunch[dev]' "
            "(or pass --no-schema)"
        ) from None
    return kubernetes_validate


AFFINITY_KINDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")


def check_affinity(affinity: dict[str, Any]) -> None:
    """spec.affinity against the upstream core/v1 Affinity schema (when kubernetes-validate
    is installed; otherwise only its top-level keys), so render never passes on a bad one."""
    for key, value in affinity.items():
        if key not in AFFINITY_KINDS:
            raise SpecError(
                f"spec.affinity.{key}", f"unknown key; known: {', '.join(AFFINITY_KINDS)}"
            )
        if not isinstance(value, dict):
            raise SpecError(f"spec.affinity.{key}", "expected a mapping")
    _check_affinity_numbers(affinity, "spec.affinity")
    _check_affinity_rules(affinity)
    try:
        kubernetes_validate = _import()
    except SchemaUnavailable:
        return
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "affinity"},
        "spec": {"containers": [{"name": "trainer"}], "affinity": affinity},
    }
    try:
        kubernetes_validate.validate(pod, latest_kubernetes_version(), strict=True)
    except kubernetes_validate.ValidationError as error:
        path = ".".join(str(p) for p in error.path) or "spec.affinity"
        raise SpecError(path, error.message) from None


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
WEIGHT_RANGE = (1, 100)
"""A preferred term's weight, as the API server checks it (the schema says only int32)."""


def _check_affinity_numbers(value: Any, where: str) -> None:
    """Every number in an affinity is an int32 (the server would wrap a larger one around:
    2^32+50 is stored as 50); a weight is 1-100."""
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}"
            if key == "weight" and isinstance(item, int) and not isinstance(item, bool):
                low, high = WEIGHT_RANGE
                if not low <= item <= high:
                    raise SpecError(path, f"must be between {low} and {high}, got {item}")
            _check_affinity_numbers(item, path)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_affinity_numbers(item, f"{where}[{i}]")
    elif (
        isinstance(value, int)
        and not isinstance(value, bool)
        and not INT32_MIN <= value <= INT32_MAX
    ):
        raise SpecError(where, f"{value} is out of range (at most {INT32_MAX})")


NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _check_affinity_rules(affinity: dict[str, Any]) -> None:
    """The API server's own rules for an affinity that its schema does not state (the
    schema only has the shapes): so that what render accepts, the server accepts."""
    base = "spec.affinity"
    node = _mapping(affinity.get("nodeAffinity"))
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        where = f"{base}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        terms = _items(_mapping(required).get("nodeSelectorTerms"))
        if not terms:
            raise SpecError(f"{where}.nodeSelectorTerms", "needs at least one term")
        for i, term in enumerate(terms):
            _check_node_term(_mapping(term), f"{where}.nodeSelectorTerms[{i}]")
    preferred = "preferredDuringSchedulingIgnoredDuringExecution"
    for i, item in enumerate(_items(node.get(preferred))):
        where = f"{base}.nodeAffinity.{preferred}[{i}].preference"
        _check_node_term(_mapping(_mapping(item).get("preference")), where)
    for kind in ("podAffinity", "podAntiAffinity"):
        pod = _mapping(affinity.get(kind))
        for i, term in enumerate(_items(pod.get("requiredDuringSchedulingIgnoredDuringExecution"))):
            where = f"{base}.{kind}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"
            _check_pod_term(_mapping(term), where)
        for i, item in enumerate(_items(pod.get(preferred))):
            where = f"{base}.{kind}.{preferred}[{i}].podAffinityTerm"
            _check_pod_term(_mapping(_mapping(item).get("podAffinityTerm")), where)


def _check_node_term(term: dict[str, Any], where: str) -> None:
    for field in ("matchExpressions", "matchFields"):
        for i, requirement in enumerate(_items(term.get(field))):
            _check_requirement(_mapping(requirement), f"{where}.{field}[{i}]", NODE_OPERATORS)


def _check_pod_term(term: dict[str, Any], where: str) -> None:
    if not term.get("topologyKey"):
        raise SpecError(f"{where}.topologyKey", "is required (e.g. kubernetes.io/hostname)")
    selector = _mapping(term.get("labelSelector"))
    for i, requirement in enumerate(_items(selector.get("matchExpressions"))):
        where_i = f"{where}.labelSelector.matchExpressions[{i}]"
        _check_requirement(_mapping(requirement), where_i, LABEL_OPERATORS)


def _check_requirement(requirement: dict[str, Any], where: str, operators: tuple[str, ...]) -> None:
    operator = requirement.get("operator")
    values = _items(requirement.get("values"))
    if operator not in operators:
        raise SpecError(f"{where}.operator", f"{operator!r} is not one of {', '.join(operators)}")
    if operator in ("In", "NotIn") and not values:
        raise SpecError(f"{where}.values", f"needs at least one value with operator {operator}")
    if operator in ("Exists", "DoesNotExist") and values:
        raise SpecError(f"{where}.values", f"must be empty with operator {operator}")
    if operator in ("Gt", "Lt") and (len(values) != 1 or not str(values[0]).lstrip("-").isdigit()):
        raise SpecError(f"{where}.values", f"needs exactly one integer with operator {operator}")
