"""Fixtures for the infrastructure tests: the repository, the linters' binaries, `make -n`.

These tests check what cannot be run here (images, clusters, workflows) by construction:
linters on the files, `make -n` on the targets, stubbed tools around the scripts. None needs
Docker, a cluster or the network. A test skips only when its tool is missing, which means the
dev extra is not installed; CI installs it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import pytest

from tests.infra._infra import MAKE_ENV_NOISE, REPO, require_tool


@pytest.fixture
def make() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run `make ARGS...` in the repository with a clean environment; returns the result."""
    make_bin = require_tool("make", "the `make` package")
    env = {k: v for k, v in os.environ.items() if k not in MAKE_ENV_NOISE}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [make_bin, "--no-print-directory", "-C", str(REPO), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return run


@pytest.fixture
def make_dry_run(
    make: Callable[..., subprocess.CompletedProcess[str]],
) -> Callable[..., str]:
    """`make -n ARGS...`: the commands a target would run; fails the test if make fails."""

    def run(*args: str) -> str:
        result = make("-n", *args)
        assert result.returncode == 0, f"make -n {' '.join(args)} failed:\n{result.stderr}"
        return result.stdout

    return run
