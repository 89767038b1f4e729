"""One version: pyproject.toml's drives the images' tags, the operator's Deployment, the
default job's image, the CRD's version label and annotation and the Helm chart's appVersion.

The Makefile reads the version from pyproject.toml; everything else that pins it is found by
scripts/set_version.py's patterns and must agree (a release bump is `python
scripts/set_version.py X.Y.Z`, which these tests also run on a copy of the tree)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

import launcher
from launcher.core import labels
from tests.infra._infra import REPO
from tests.infra.test_infra_makefile import MakeDryRun, docker_build, option


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "set_version", REPO / "scripts" / "set_version.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


set_version = _load_script()
VERSION = set_version.source_version(REPO)
CHART = REPO / "charts" / "tflaunch-operator" / "Chart.yaml"


def test_every_pinned_version_is_pyprojects() -> None:
    refs = set_version.references(REPO)

    wrong = [str(r) for r in refs if r.version != VERSION]
    assert not wrong, (
        f"these pin another version than pyproject.toml's {VERSION}: {wrong}; "
        f"run python scripts/set_version.py {VERSION}"
    )
    # Not vacuous: the places that matter are among the references found.
    paths = {r.path for r in refs}
    assert {
        "launcher/__init__.py",
        "launcher/core/default_job.yaml",
        "manifests/operator/operator.yaml",
        "manifests/operator/crd.yaml",
        "docker/Dockerfile",
        "docker/Dockerfile.operator",
    } <= paths


def test_the_package_reports_pyprojects_version() -> None:
    assert launcher.__version__ == VERSION


def test_the_makefile_tags_both_images_with_pyprojects_version(make_dry_run: MakeDryRun) -> None:
    trainer = docker_build(make_dry_run("image"))
    operator = docker_build(make_dry_run("operator-image"))

    assert option(trainer, "--tag") == f"tflaunch-trainer:{VERSION}"
    assert option(operator, "--tag") == f"tflaunch-operator:{VERSION}"
    assert f"VERSION={VERSION}" in trainer and f"VERSION={VERSION}" in operator


def test_the_operator_deployment_runs_the_operator_image_of_this_version() -> None:
    documents = yaml.safe_load_all((REPO / "manifests" / "operator" / "operator.yaml").read_text())
    (deployment,) = [d for d in documents if d and d["kind"] == "Deployment"]

    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"tflaunch-operator:{VERSION}"
    assert deployment["metadata"]["labels"]["app.kubernetes.io/version"] == VERSION


def test_the_default_job_runs_the_trainer_image_of_this_version() -> None:
    default = yaml.safe_load((REPO / "launcher" / "core" / "default_job.yaml").read_text())

    assert default["spec"]["image"] == f"tflaunch-trainer:{VERSION}-cpu"


def test_the_crd_says_which_release_generated_it() -> None:
    crd = yaml.safe_load((REPO / "manifests" / "operator" / "crd.yaml").read_text())

    assert crd["metadata"]["annotations"][labels.RELEASE_VERSION] == VERSION
    assert crd["metadata"]["labels"]["app.kubernetes.io/version"] == VERSION


@pytest.mark.skipif(not CHART.exists(), reason="no charts/tflaunch-operator/ in this tree yet")
def test_the_helm_charts_app_version_is_pyprojects() -> None:
    chart = yaml.safe_load(CHART.read_text())
    values = yaml.safe_load((CHART.parent / "values.yaml").read_text()) or {}

    assert str(chart["appVersion"]) == VERSION
    # The image tag defaults to the appVersion: a tag pinned in values.yaml must agree too.
    tag = ((values.get("image") or {}).get("tag")) or VERSION
    assert str(tag) == VERSION


def test_setting_a_new_version_moves_every_reference_and_the_generated_crd_agrees(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    for path in set_version.tracked_files(REPO):
        if (REPO / path).is_file():
            (tree / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / path, tree / path)
    before = set_version.references(tree)

    set_version.set_version("9.8.7", tree)

    after = set_version.references(tree)
    assert set_version.source_version(tree) == "9.8.7"
    assert [(r.path, r.line) for r in after] == [(r.path, r.line) for r in before]
    assert {r.version for r in after} == {"9.8.7"}
    # The rewritten CRD is exactly what the generator writes for the new version.
    generated = subprocess.run(
        [sys.executable, "-m", "launcher.operator.crd"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
    ).stdout
    assert generated == (tree / "manifests" / "operator" / "crd.yaml").read_text()
