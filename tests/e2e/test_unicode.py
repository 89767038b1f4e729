"""Characters beyond the BMP reach the real API server intact (issue 27 item 8): a server-side
apply body is read as YAML, which refuses the JSON surrogate-pair escapes (`\\ud83d\\ude80`)
the client would write; tflaunch sends raw UTF-8 instead, from the CLI and the operator."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import ControlPlane, eventually, pod_hooks, write_spec
from tests.e2e.test_operator import Operator
from tests.e2e.test_operator import operator as operator  # the module-scoped fixture

pytestmark = pytest.mark.e2e

ROCKET = "\U0001f680"
SCRIPT = f'print("{ROCKET} launched")\n'


def _env(job: dict) -> dict[str, str]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_an_emoji_in_a_script_and_in_spec_env_is_stored_as_written(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    spec = write_spec(tmp_path / "job.yaml", "rocket", namespace, hooks=pod_hooks(run_for="1h"))
    run = cp.tflaunch(
        "submit", str(spec), "--script", str(script), "--set", f"spec.env.GREETING={ROCKET}"
    )
    assert run.code == 0, run
    (config_map,) = cp.get("configmaps", "-n", namespace, "-l", "tflaunch.dev/job-name=rocket")[
        "items"
    ]
    assert config_map["data"] == {"train.py": SCRIPT}
    job = cp.get("job", "rocket-worker", "-n", namespace)
    assert _env(job)["GREETING"] == ROCKET
    again = cp.tflaunch(
        "submit", str(spec), "--script", str(script), "--set", f"spec.env.GREETING={ROCKET}"
    )
    assert again.code == 0 and "unchanged" in again.out, again


def test_an_emoji_reaches_the_job_through_the_operator(
    control_plane: ControlPlane, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(
        tmp_path / "job.yaml", "rocket", namespace, hooks=pod_hooks(run_for="forever"),
        env={"GREETING": ROCKET},
    )  # fmt: skip
    run = cp.tflaunch("submit", str(spec), "--operator")
    assert run.code == 0, run
    assert cp.get("mwj", "rocket", "-n", namespace)["spec"]["env"] == {"GREETING": ROCKET}
    job = eventually(
        lambda: cp.get("jobs", "-n", namespace)["items"],
        what="the Job the operator applies", timeout=90,
    )[0]  # fmt: skip
    assert _env(job)["GREETING"] == ROCKET, operator.log()
