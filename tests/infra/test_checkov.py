"""Secure by default: the rendered manifests pass checkov's Kubernetes checks.

Every example spec is rendered with `tflaunch render SPEC --out-dir DIR` and scanned with
`checkov -d DIR --framework kubernetes`. Two checks are allowed to fail, by design:

- CKV_K8S_43 (image by digest): the spec names a tag; a digest is the user's choice.
- CKV_K8S_21 (default namespace): the examples target `default`; -n picks another.

checkov lives in its own venv (it conflicts with the dev dependencies): `make checkov-venv`
makes .venv-checkov, which is found, or the binary named by $CHECKOV, or one on PATH. It runs
offline (`--skip-download`: no guideline links are fetched).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.infra._infra import REPO

ALLOWED_FAILURES = {
    "CKV_K8S_43": "image by digest: the user's choice, the spec names a tag",
    "CKV_K8S_21": "default namespace: the examples target it; -n picks another",
    "CKV_K8S_15": "pull policy Always: unset, Kubernetes' default holds (IfNotPresent for a "
    "pinned tag), which an image loaded into a node needs; spec.imagePullPolicy sets Always",
}

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("launcher.core.render") is None,
    reason="launcher.core.render is not written yet",
)


def find_checkov() -> str | None:
    candidates = [os.environ.get("CHECKOV"), str(REPO / ".venv-checkov" / "bin" / "checkov")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    from shutil import which

    return which("checkov")


def tflaunch_command() -> list[str]:
    """The `tflaunch` console script beside this Python, else the CLI module through it."""
    script = Path(sys.executable).parent / "tflaunch"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "launcher"]


def render(spec: str, out_dir: Path, *extra: str) -> None:
    result = subprocess.run(
        [*tflaunch_command(), "render", spec, "--out-dir", str(out_dir), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"tflaunch render {spec} failed:\n{result.stderr}"
    assert any(out_dir.glob("*.yaml")), f"tflaunch render {spec} wrote no manifest"


def scan(checkov: str, directory: Path) -> dict[str, Any]:
    result = subprocess.run(
        [
            checkov,
            "-d",
            str(directory),
            "--framework",
            "kubernetes",
            "-o",
            "json",
            "--quiet",
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # Exit 1 means "some check failed": the failures are judged below, not here.
    assert result.returncode in (0, 1), f"checkov crashed:\n{result.stderr[-3000:]}"
    report = json.loads(result.stdout)
    # One framework gives one report; checkov gives a list when it ran several.
    reports = report if isinstance(report, list) else [report]
    (kubernetes,) = [r for r in reports if r.get("check_type") == "kubernetes"]
    return dict(kubernetes)


CASES = [
    pytest.param(f"examples/{path.name}", (), id=path.stem)
    for path in sorted((REPO / "examples").glob("*.yaml"))
] + [pytest.param("examples/mnist.yaml", ("--layout", "per-worker"), id="mnist-per-worker")]


@pytest.mark.parametrize(("spec", "extra"), CASES)
def test_rendered_manifests_pass_checkov(spec: str, extra: tuple[str, ...], tmp_path: Path) -> None:
    checkov = find_checkov()
    if checkov is None:
        pytest.skip("checkov not found: run `make checkov-venv` (or set CHECKOV=/path/to/checkov)")
    out_dir = tmp_path / "manifests"
    render(spec, out_dir, *extra)

    report = scan(checkov, out_dir)

    summary = report["summary"]
    assert summary["parsing_errors"] == 0, summary
    assert summary["resource_count"] >= 3, f"checkov saw too few objects: {summary}"
    unexpected = [
        f"{check['check_id']} on {check['resource']}: {check['check_name']}"
        for check in report["results"]["failed_checks"]
        if check["check_id"] not in ALLOWED_FAILURES
    ]
    assert not unexpected, "checkov failures:\n" + "\n".join(unexpected)
