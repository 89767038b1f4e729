"""Loading a job spec: YAML -> plain data -> overrides -> typed model -> validation.

Kept apart from the types (`launcher.api.spec`) so that the model imports none of its
checks. Everything a user can get wrong is caught here, as a `SpecError` naming the field
and the fix, before anything is rendered or applied: types by `launcher.core.typed` as the
document is built into the dataclasses, everything else by `validate()` (its rules are in
`launcher.core.validation` and `launcher.core.limits`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from launcher.api.identity import API_VERSION, KIND
from launcher.api.spec import MultiWorkerJob
from launcher.core import script as script_file
from launcher.core import tfjob, typed, validation, yamldoc
from launcher.core.errors import SpecError
from launcher.core.mistakes import Mistakes


def load_job(
    path: str | None, overrides: Sequence[tuple[str, Any]] = (), *, local: bool = False
) -> MultiWorkerJob:
    """Read (a MultiWorkerJob or a Kubeflow TFJob), override, type and validate a job spec.
    `local`: for `tflaunch local`, which runs no image, so a spec without spec.image gets the
    default one rather than an error. Raises SpecError on any bad input."""
    document = yamldoc.read_document(path)
    if tfjob.is_tfjob(document):
        document = tfjob.to_multiworkerjob(document)
    yamldoc.apply_overrides(document, overrides)
    spec = document.get("spec")
    if local and isinstance(spec, dict) and not spec.get("image"):
        spec["image"] = yamldoc.default_document()["spec"]["image"]
    base = Path(path).parent if path not in (None, "-") else Path.cwd()
    script_file.expand_path(document, base)
    return job_from_document(document, local=local)


def job_from_document(document: Mapping[str, Any], *, local: bool = False) -> MultiWorkerJob:
    """Type and validate plain data (a parsed file, or a custom resource's body); `local`:
    for `tflaunch local`, whose workers run no image (`validate`)."""
    spec = document.get("spec")
    if isinstance(spec, Mapping) and isinstance(spec.get("script"), str):
        raise SpecError(
            "spec.script",
            "a path works only with the tflaunch CLI; a MultiWorkerJob holds {name, source} "
            "(`tflaunch render --script FILE` writes it out)",
        )
    job = typed.build(MultiWorkerJob, document, "")
    validate(job, local=local)
    return job


def validate(job: MultiWorkerJob, *, local: bool = False) -> None:
    """Check every cross-field and format rule; raise every SpecError found, at once.
    `local`: not the image's (a local run uses none)."""
    found = Mistakes()
    found.check(_check_header, job)
    validation.gather(job, found)
    if not local:
        found.check(validation.check_gpu_image, job.spec)
    found.raise_any()


def _check_header(job: MultiWorkerJob) -> None:
    if job.api_version != API_VERSION:
        raise SpecError("apiVersion", f"must be {API_VERSION}, got {job.api_version!r}")
    if job.kind != KIND:
        raise SpecError("kind", f"must be {KIND}, got {job.kind!r}")
