"""What the image tests share: the archives `hack/images.sh build` made for this tree, their
image configs, and runs under runc (`hack/images.sh run`).

An image that is not built, or a machine that cannot run it, skips its tests with one line
naming the fix; the environment variable a test module names (TFLAUNCH_REQUIRE_IMAGES for the
images CI builds) turns that into a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import IO, Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGES_SH = ROOT / "hack" / "images.sh"
PYPROJECT = (ROOT / "pyproject.toml").read_text()
VERSION = re.search(r'^version = "([^"]+)"', PYPROJECT, re.M)[1]  # type: ignore[index]
TF_PIN = re.search(r'"tensorflow==([^"]+)"', PYPROJECT)[1]  # type: ignore[index]
UID = "10001"
RUN_TIMEOUT = 900
REQUIRE_IMAGES = "TFLAUNCH_REQUIRE_IMAGES"


def unavailable(reason: str, require: str = REQUIRE_IMAGES) -> NoReturn:
    """Skip with `reason`, or fail when the environment variable `require` is 1."""
    message = f"image: {reason}"
    if os.environ.get(require) == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def images_sh(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(IMAGES_SH), *args], capture_output=True, text=True, timeout=timeout
    )


def archive(name: str, make_target: str, require: str = REQUIRE_IMAGES) -> Path:
    """The archive of image `name` for this tree's current inputs (never an older build)."""
    proc = images_sh("path", name)
    if proc.returncode != 0:
        unavailable(f"no {name} image built for this tree; `make {make_target}` builds it", require)
    return Path(proc.stdout.strip())


def require_runc(require: str = REQUIRE_IMAGES) -> None:
    if os.geteuid() != 0:
        unavailable("running an image needs root (runc)", require)
    missing = [tool for tool in ("runc", "skopeo", "umoci") if shutil.which(tool) is None]
    if missing:
        unavailable(f"{', '.join(missing)} not found: apt-get install {' '.join(missing)}", require)


def run(
    image: Path,
    *args: str,
    name: str | None = None,
    command: bool = False,
    env: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """`args` in the image: in place of its CMD, or with `command` of its ENTRYPOINT too (a
    pod's `command`); `env` as KEY=VALUE."""
    extra = ["--name", name] if name else []
    if command:
        extra.append("--command")
    for item in env:
        extra += ["-e", item]
    return images_sh("run", str(image), *extra, "--", *args, timeout=RUN_TIMEOUT)


def image_config(image: Path) -> tuple[list[str], dict[str, Any]]:
    """The docker-archive's tags and image config (manifest.json, then the config it names)."""
    with tarfile.open(image) as tar:
        manifest = json.load(_member(tar, "manifest.json"))[0]
        config = json.load(_member(tar, manifest["Config"]))
    return manifest.get("RepoTags") or [], config


def _member(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    f = tar.extractfile(name)
    assert f is not None, f"{name} is not a file in the archive"
    return f


def tagged(tags: list[str], ref: str) -> bool:
    return ref in tags or f"docker.io/library/{ref}" in tags
