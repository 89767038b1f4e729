"""`spec.script`: one file of the user's own, carried in the spec and mounted into every worker.

Users iterate on a training script without building an image: the CLI reads the file
(`--script train.py`, or `script: train.py` in a spec file, relative to that file) into the
spec as `{name, source}`, which is also what a MultiWorkerJob holds, so the operator needs
no access to the user's disk. Render puts it in a ConfigMap owned by the job and mounts it
read-only; `tflaunch local` writes it to the run's workdir.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from launcher.core.errors import SpecError

MOUNT_PATH = "/opt/tflaunch/script"
"""Where every worker finds the script (a read-only ConfigMap volume)."""
MAX_BYTES = 1024 * 1024
"""A ConfigMap holds at most 1 MiB; larger code goes into an image
(docker/Dockerfile.custom-example)."""
NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$")
"""A ConfigMap key that is also a plain file name (no directories, not hidden)."""
FIELD = "spec.script"


def expand_path(document: dict[str, Any], base: Path) -> None:
    """Replace a `spec.script` path (relative to `base`) by `{name, source}` in place.

    Raises:
        SpecError: the file cannot be read, is not UTF-8 text, or is too large.
    """
    spec = document.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("script"), str):
        return
    path = base / Path(spec["script"]).expanduser()
    try:
        with path.open("rb") as file:  # /dev/zero, a FIFO: read no more than can be kept
            data = file.read(MAX_BYTES + 1)
    except OSError as e:
        raise SpecError(FIELD, f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise SpecError(
            FIELD,
            f"{path.name} is larger than {MAX_BYTES} bytes (1 MiB), what a ConfigMap holds; "
            "put larger code into an image built FROM the trainer image "
            "(docker/Dockerfile.custom-example) and name it in spec.command",
        )
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(
            FIELD, f"{path} is not UTF-8 text; a script is one source file (e.g. train.py)"
        ) from None
    spec["script"] = {"name": path.name, "source": source}


def check_size(name: str, size: int) -> None:
    if size > MAX_BYTES:
        raise SpecError(
            FIELD,
            f"{name} is {size} bytes, more than the {MAX_BYTES} (1 MiB) a ConfigMap holds; "
            "put larger code into an image built FROM the trainer image "
            "(docker/Dockerfile.custom-example) and name it in spec.command",
        )


def check_name(name: str) -> None:
    if not NAME.fullmatch(name) or len(name) > 253:
        raise SpecError(
            f"{FIELD}.name",
            f"{name!r} is not a plain file name (letters, digits, '.', '_', '-'; no '/')",
        )
