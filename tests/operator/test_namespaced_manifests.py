"""manifests/operator/namespaced/: the operator for some namespaces only, generated from the
cluster-wide manifests (so their RBAC never drifts), with no cluster-wide grant at all."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from launcher.cli.operator_cmd import operator_command

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import namespaced_operator  # noqa: E402


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


NAMESPACED = _documents(namespaced_operator.TARGET)
CLUSTER_WIDE = _documents(namespaced_operator.SOURCE)


def test_the_checked_in_variant_is_generated_from_the_cluster_wide_one() -> None:
    assert namespaced_operator.TARGET.read_text() == namespaced_operator.text(
        namespaced_operator.EXAMPLE_NAMESPACES
    ), "regenerate it: python scripts/namespaced_operator.py --write"


@pytest.mark.parametrize(
    "document", NAMESPACED, ids=lambda d: f"{d['kind']}/{d['metadata']['name']}"
)
def test_every_namespaced_manifest_is_a_valid_kubernetes_object(document: dict[str, Any]) -> None:
    # ValidatingAdmissionPolicy is v1 from 1.30 (values.yaml: tenancy.admissionPolicy)
    version = "1.30" if document["kind"].startswith("ValidatingAdmissionPolicy") else "1.29"
    kubernetes_validate.validate(document, version, strict=True)


def test_each_served_namespace_grants_exactly_the_cluster_roles_rules_and_nothing_is_cluster_wide():
    kinds = {d["kind"] for d in NAMESPACED}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    (cluster_role,) = [d for d in CLUSTER_WIDE if d["kind"] == "ClusterRole"]
    account = next(d for d in NAMESPACED if d["kind"] == "ServiceAccount")["metadata"]
    for ns in namespaced_operator.EXAMPLE_NAMESPACES:
        (role,) = [
            d for d in NAMESPACED if d["kind"] == "Role" and d["metadata"]["namespace"] == ns
        ]
        assert role["rules"] == cluster_role["rules"]
        (binding,) = [
            d for d in NAMESPACED if d["kind"] == "RoleBinding" and d["metadata"]["namespace"] == ns
        ]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": role["metadata"]["name"]}  # fmt: skip
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
        ]


def test_the_deployment_serves_exactly_the_namespaces_it_has_roles_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (deployment,) = [d for d in NAMESPACED if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    monkeypatch.setenv("TFLAUNCH_OPERATOR_NAMESPACES", env["TFLAUNCH_OPERATOR_NAMESPACES"])

    context = operator_command.make_context("operator", list(container["args"]))

    assert context.params["all_namespaces"] is False
    assert context.params["namespaces"] == namespaced_operator.EXAMPLE_NAMESPACES
    assert context.params["leader_elect"] is True


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-n", "a", "-n", "b"], ("a", "b")),
        (["-n", "a,b"], ("a", "b")),
        (["-n", "a, b"], ("a", "b")),
    ],
)
def test_namespaces_may_be_repeated_or_comma_separated(args: list[str], expected: tuple[str, ...]):
    assert operator_command.make_context("operator", args).params["namespaces"] == expected
