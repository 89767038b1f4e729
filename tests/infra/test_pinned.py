"""What tflaunch ships is pinned to what its suite ran with (issue 27, "Pin what you ship"):
constraints.txt holds an exact version of every dependency, within pyproject.toml's bounds,
and `make install`, CI (through `make install`) and both images install with it. kubernetes
37.0.2 arrived unpinned once and broke every GPU job of the operator."""

from __future__ import annotations

import importlib.metadata as md
import re

import tomllib
from packaging.requirements import Requirement

from tests.infra._infra import REPO

PINS = {
    re.sub(r"[-_.]+", "-", name).lower(): version
    for name, _, version in (
        line.partition("==")
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
}


def _requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    found = [Requirement(r) for r in project["dependencies"]]
    for extra in ("trainer", "operator", "plot", "dev"):
        found += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return found


def test_every_dependency_has_an_exact_pin_within_pyprojects_bounds() -> None:
    for requirement in _requirements():
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        assert name in PINS, f"{requirement.name} is not pinned in constraints.txt (make lock)"
        assert requirement.specifier.contains(PINS[name], prereleases=True), (
            f"constraints.txt pins {name}=={PINS[name]}, outside pyproject's {requirement}"
        )


def test_the_runtime_dependencies_have_an_upper_bound() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = project["dependencies"] + project["optional-dependencies"]["operator"]
    for text in runtime:
        requirement = Requirement(text)
        assert any(s.operator in ("<", "<=", "==", "~=") for s in requirement.specifier), text


def test_this_environment_runs_the_pinned_versions() -> None:
    for name in ("kubernetes", "kopf", "click", "jinja2", "pyyaml", "pydantic", "urllib3"):
        assert md.version(name) == PINS[name], f"{name}: run make install (constraints.txt)"


def test_make_install_and_both_images_install_with_the_constraints() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "--constraint $(CONSTRAINTS) -e '.[dev,trainer]'" in makefile
    assert (
        "--constraint /build/constraints.txt" in (REPO / "docker/Dockerfile.operator").read_text()
    )
    assert (
        "COPY constraints.txt /wheels/constraints.txt" in (REPO / "docker/Dockerfile").read_text()
    )
    assert '--constraint "$pinned"' in (REPO / "docker/install-trainer.sh").read_text()
    assert "!constraints.txt" in (REPO / ".dockerignore").read_text()
    assert "make install" in (REPO / ".ci/run").read_text()
    for workflow in ("ci.yml", "e2e-kind.yml"):  # the pip cache follows the pins too
        assert "constraints.txt" in (REPO / ".github/workflows" / workflow).read_text()
