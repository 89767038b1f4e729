"""Validation at admission on the real API server: the generated CRD (manifests/operator/crd.yaml)
refuses every bad MultiWorkerJob at `kubectl apply`, naming the field, with the same message
as `tflaunch validate` of the same file; the fields' bounds come from the same model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launcher.api import rules
from tests import rule_cases
from tests.e2e.conftest import ROOT, ControlPlane

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def crd(control_plane: ControlPlane) -> None:
    control_plane.kubectl("apply", "--server-side", "-f", str(ROOT / "manifests/operator/crd.yaml"))
    control_plane.wait_established("multiworkerjobs.tflaunch.dev")


def _write(tmp_path: Path, document: dict) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.parametrize("rule", rules.RULES, ids=lambda r: f"{r.field}:{r.message[:30]}")
def test_kubectl_apply_of_a_bad_multiworkerjob_is_refused_with_the_clis_message(
    control_plane: ControlPlane, crd: None, namespace: str, tmp_path: Path, rule: rules.Rule
) -> None:
    path = _write(tmp_path, rule_cases.document(rule, namespace))
    applied = control_plane.kubectl("apply", "-f", str(path), check=False)
    assert applied.code != 0, applied
    assert f"{rule.field}: Invalid value" in applied.err, applied
    assert rule.message in applied.err.replace("\n", " "), applied
    assert control_plane.get("mwj", "-n", namespace)["items"] == []
    checked = control_plane.tflaunch("validate", str(path), "--no-schema")
    assert checked.code == 2, checked
    assert f"{rule.field}: " in checked.err and rule.message in checked.err, checked


@pytest.mark.parametrize(
    "change, field, server_says",
    [
        ({"workers": -1}, "spec.workers", "greater than or equal to 1"),
        ({"workers": 10_001}, "spec.workers", "less than or equal to 10000"),
        ({"trainer": {"epochs": 0}}, "spec.trainer.epochs", "greater than or equal to 1"),
        ({"gpusPerWorker": -1}, "spec.gpusPerWorker", "greater than or equal to 0"),
        ({"schedulerName": "Not_A_Name"}, "spec.schedulerName", "should match"),
        ({"queueName": "q" * 64, "gang": "volcano"}, "spec.queueName", "more than 63"),
        ({"gang": "slurm"}, "spec.gang", "Unsupported value"),
        # issue 27 item 7: the operator raised OverflowError on every reconcile of these
        (
            {"terminationGracePeriodSeconds": 2**63 - 1},
            "spec.terminationGracePeriodSeconds",
            "less than or equal to 2147483647",
        ),
        ({"backoffLimit": 2**31}, "spec.backoffLimit", "less than or equal to 2147483647"),
        ({"trainer": {"epochs": 2**31}}, "spec.trainer.epochs", "less than or equal to 2147483647"),
    ],
)
def test_the_fields_bounds_are_checked_at_admission_and_by_the_cli(
    control_plane: ControlPlane,
    crd: None,
    namespace: str,
    tmp_path: Path,
    change: dict,
    field: str,
    server_says: str,
) -> None:
    document = rule_cases.document(rules.PORT_RANGE, namespace)
    document["spec"] = {**rule_cases.BASE["spec"], **change}
    path = _write(tmp_path, document)
    applied = control_plane.kubectl("apply", "-f", str(path), check=False)
    assert applied.code != 0 and f"{field}: " in applied.err and server_says in applied.err, applied
    checked = control_plane.tflaunch("validate", str(path), "--no-schema")
    assert checked.code == 2 and f"{field}" in checked.err, checked


def test_a_typo_the_server_would_prune_is_caught_by_tflaunch_validate(
    control_plane: ControlPlane, crd: None, namespace: str, tmp_path: Path
) -> None:
    document = rule_cases.document(rules.PORT_RANGE, namespace)
    document["spec"] = {**rule_cases.BASE["spec"], "wrokers": 4}
    path = _write(tmp_path, document)
    # A client that does not ask for strict field validation (the operator's kind of client,
    # or kubectl --validate=false) gets the typo pruned silently: workers stays at its default.
    control_plane.kubectl("apply", "--validate=false", "-f", str(path))
    stored = control_plane.get("mwj", "port", "-n", namespace)
    assert "wrokers" not in stored["spec"] and stored["spec"]["workers"] == 2
    checked = control_plane.tflaunch("validate", str(path), "--no-schema")
    assert checked.code == 2, checked
    assert "spec.wrokers: unknown key; did you mean 'workers'?" in checked.err, checked
    assert "Traceback" not in checked.err


@pytest.mark.parametrize("restart", [None, "recreate"])
def test_port_65535_is_admitted_when_restart_in_place_is_not_written(
    control_plane: ControlPlane, crd: None, namespace: str, tmp_path: Path, restart: str | None
) -> None:
    """Unset, spec.restart resolves to recreate there (launcher.core.restart): no error for a
    field the user did not write, at admission or by the CLI; the server stores no default."""
    document = rule_cases.document(rules.PORT_RANGE, namespace)
    spec = {**rule_cases.BASE["spec"], "port": 65535}
    document["spec"] = spec if restart is None else {**spec, "restart": restart}
    path = _write(tmp_path, document)
    control_plane.kubectl("apply", "-f", str(path))
    (stored,) = control_plane.get("mwj", "-n", namespace)["items"]
    assert stored["spec"].get("restart") == restart, stored["spec"]
    assert control_plane.tflaunch("validate", str(path), "--no-schema").code == 0
