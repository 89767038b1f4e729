"""Validation of rendered objects against the upstream Kubernetes OpenAPI schemas.

kubernetes-validate is optional (the dev extra): `tflaunch validate` says so when it is
missing instead of pretending the objects were checked.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from launcher.core.errors import SpecError, TflaunchError


class SchemaUnavailable(TflaunchError):
    pass


def latest_kubernetes_version() -> str:
    kubernetes_validate = _import()
    return str(kubernetes_validate.latest_version())


def validate_objects(objects: Iterable[dict[str, Any]], kubernetes_version: str) -> None:
    """Validate every object strictly (unknown fields are errors); raise on the first failure."""
    kubernetes_validate = _import()
    for obj in objects:
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
