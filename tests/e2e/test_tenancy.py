"""No confused deputy (issue 27 item 4), on the real control plane: a user allowed to write
MultiWorkerJobs but not Jobs is refused at admission by the chart's ValidatingAdmissionPolicy
(its CEL asks the authorizer with the user's own rights), so is one who names a
ServiceAccount they may not use; and the operator, started with the chart's allowlist, refuses
a priority class, a toleration of every taint and a node picked by name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import ControlPlane, Run, eventually, pod_hooks
from tests.e2e.test_operator import Operator, _mwj, _phase_is, install_operator

pytestmark = pytest.mark.e2e

CHART_VALUES = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "charts/tflaunch-operator/values.yaml").read_text()
)["tenancy"]


@pytest.fixture(scope="module")
def operator(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    """The operator with the chart's default allowlist (the Deployment's arguments)."""
    home = tmp_path_factory.mktemp("operator")
    running = Operator(
        install_operator(control_plane, home), home / "operator.log",
        "--allowed-priority-classes", ",".join(CHART_VALUES["priorityClassNames"]),
        "--allowed-toleration-keys", ",".join(CHART_VALUES["tolerationKeys"]),
        "--allowed-node-labels", ",".join(CHART_VALUES["nodeLabelKeys"]),
    )  # fmt: skip
    try:
        yield running
    finally:
        running.stop()


def _tenant(cp: ControlPlane, namespace: str, tmp_path: Path, *rules: dict[str, Any]) -> Path:
    """A ServiceAccount with exactly `rules` in `namespace`; its kubeconfig."""
    cp.kubectl("create", "serviceaccount", "tenant", "-n", namespace)
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "tenant", "namespace": namespace},
        "rules": [
            {"apiGroups": ["tflaunch.dev"], "resources": ["multiworkerjobs"],
             "verbs": ["get", "list", "create", "patch", "update", "delete"]},
            *rules,
        ],
    }  # fmt: skip
    cp.apply(role)
    cp.kubectl(
        "create", "rolebinding", "tenant", "-n", namespace, "--role", "tenant",
        f"--serviceaccount={namespace}:tenant",
    )  # fmt: skip
    return cp.account_kubeconfig("tenant", namespace, tmp_path / "tenant.kubeconfig")


def _apply_as(cp: ControlPlane, kubeconfig: Path, doc: dict[str, Any]) -> Run:
    return cp.kubectl("--kubeconfig", str(kubeconfig), "apply", "-f", "-",
                      stdin=yaml.safe_dump(doc), check=False)  # fmt: skip


JOBS = {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}


def test_a_user_who_may_not_create_jobs_is_refused_at_admission(
    control_plane: ControlPlane, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    tenant = _tenant(cp, namespace, tmp_path)
    can = cp.kubectl("--kubeconfig", str(tenant), "auth", "can-i", "create", "jobs", "-n",
                     namespace, check=False)  # fmt: skip
    assert can.out.strip() == "no", can

    refused = eventually(  # the API server loads a new policy within a few seconds
        lambda: (r := _apply_as(cp, tenant, _mwj("dep", namespace, {}))).code != 0 and r,
        what="the admission policy to refuse", timeout=60,
    )  # fmt: skip
    assert "may not create Jobs in namespace" in refused.err, refused
    assert "ValidatingAdmissionPolicy" in refused.err, refused
    assert cp.kubectl("get", "mwj", "dep", "-n", namespace, check=False).code != 0


def test_a_user_who_may_create_jobs_may_not_name_a_service_account_they_cannot_use(
    control_plane: ControlPlane, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    cp.kubectl("create", "serviceaccount", "deployer", "-n", namespace)
    tenant = _tenant(cp, namespace, tmp_path, JOBS)
    as_deployer = _mwj(
        "dep", namespace, pod_hooks(run_for="forever"), serviceAccountName="deployer"
    )

    refused = eventually(
        lambda: (r := _apply_as(cp, tenant, as_deployer)).code != 0 and r,
        what="the admission policy to refuse", timeout=60,
    )  # fmt: skip
    assert "may not use ServiceAccount deployer" in refused.err, refused

    plain = _mwj("mine", namespace, pod_hooks(run_for="forever"))
    assert (admitted := _apply_as(cp, tenant, plain)).code == 0, admitted
    eventually(_phase_is(cp, "mine", namespace, "Running"), what="Running", timeout=120)
    use = {"apiGroups": [""], "resources": ["serviceaccounts"], "resourceNames": ["deployer"],
           "verbs": ["use"]}  # fmt: skip
    role = cp.get("role", "tenant", "-n", namespace)
    role["rules"].append(use)
    cp.apply({k: role[k] for k in ("apiVersion", "kind", "metadata", "rules")})
    assert (granted := _apply_as(cp, tenant, as_deployer)).code == 0, granted


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"priorityClassName": "system-node-critical"}, "spec.priorityClassName"),
        ({"tolerations": [{"operator": "Exists"}]}, "spec.tolerations[0].key"),
        ({"nodeSelector": {"kubernetes.io/hostname": "kwok-gpu-0"}}, "spec.nodeSelector"),
    ],
)
def test_the_operator_refuses_what_its_allowlist_lacks(
    control_plane: ControlPlane, operator: Operator, namespace: str, spec: dict[str, Any],
    field: str,
) -> None:  # fmt: skip
    cp = control_plane
    cp.apply(_mwj("deputy", namespace, pod_hooks(run_for="forever"), **spec))
    status = eventually(_phase_is(cp, "deputy", namespace, "Failed"), what="Failed", timeout=90)
    assert status["reason"] == "InvalidSpec", status
    assert field in status["message"] and "tenancy." in status["message"], status
    assert not cp.get("jobs", "-n", namespace)["items"], "no pod may run with it"
