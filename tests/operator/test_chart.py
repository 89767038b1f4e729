"""charts/tflaunch-operator: `helm lint`, `helm template` of every mode validated against the
upstream Kubernetes schemas, the plain manifests generated from it, and its defaults pinned to
this package's version. helm is the one `hack/cluster.sh build` builds from its Go module
(tests/e2e/test_chart_install.py installs the chart into the real control plane)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from launcher import __version__
from launcher.cli.operator_cmd import operator_command

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import operator_manifests  # noqa: E402

CHART = operator_manifests.CHART
NS = operator_manifests.NAMESPACE


@pytest.fixture(scope="module")
def helm() -> str:
    path = Path(
        subprocess.run(
            ["bash", str(ROOT / "hack/cluster.sh"), "helm"], capture_output=True, text=True
        ).stdout.strip()
    )
    if not path.exists():
        message = "helm is not built: run make cluster-build (hack/cluster.sh build)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    os.environ.setdefault("HELM", str(path))
    return str(path)


def _render(*values: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(operator_manifests.template(*values)) if d]


def _kinds(documents: list[dict[str, Any]]) -> list[str]:
    return [d["kind"] for d in documents]


def _one(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in documents if d["kind"] == kind]
    return found


def _args(documents: list[dict[str, Any]]) -> list[str]:
    (container,) = _one(documents, "Deployment")["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def test_helm_lint_passes_strict(helm: str) -> None:
    linted = subprocess.run([helm, "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_the_plain_manifests_are_the_charts_defaults(helm: str) -> None:
    assert (
        ROOT / "manifests/operator/operator.yaml"
    ).read_text() == operator_manifests.expected(), "stale: run make operator-manifests"


def test_the_tfjob_manifests_are_the_chart_with_tfjob_enabled(helm: str) -> None:
    assert (
        ROOT / "manifests/operator/tfjob/operator.yaml"
    ).read_text() == operator_manifests.expected_tfjob(), "stale: run make operator-manifests"


def test_tfjobs_are_opt_in_and_bring_their_crd_rbac_and_flag(helm: str) -> None:
    default = _render()
    assert "CustomResourceDefinition" not in _kinds(default)
    assert "--tfjobs" not in _args(default)
    assert "kubeflow.org" not in yaml.safe_dump(_one(default, "ClusterRole"))
    enabled = _render("tfjob.enabled=true")
    crd = _one(enabled, "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "tfjobs.kubeflow.org"
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    args = _args(enabled)
    assert args[args.index("--tfjobs") + 1] == "all"  # the CRD is the chart's: no operator
    rules = _one(enabled, "ClusterRole")["rules"]
    assert {"apiGroups": ["kubeflow.org"], "resources": ["tfjobs/status"], "verbs": ["patch"]} in (
        rules
    )
    without_crd = _render("tfjob.enabled=true", "tfjob.installCRD=false")
    assert "CustomResourceDefinition" not in _kinds(without_crd)
    args = _args(without_crd)
    assert args[args.index("--tfjobs") + 1] == "managed"  # another's CRD: only managedBy ours


def test_the_charts_crd_is_the_generated_one() -> None:
    link = CHART / "crds" / "multiworkerjobs.tflaunch.dev.yaml"
    assert link.is_symlink() and link.resolve() == (ROOT / "manifests/operator/crd.yaml").resolve()


MODES = {
    "defaults": (),
    "namespaced": ("watch.allNamespaces=false", "watch.namespaces={team-a,team-b}"),
    "release-namespace-only": ("watch.allNamespaces=false",),
    "one-replica-no-metrics": (
        "replicaCount=1", "leaderElection=false", "metrics.enabled=false",
        "networkPolicy.enabled=false",
    ),
    "own-image-and-resources": (
        "image.repository=registry.example.com/ml/operator-image", "image.tag=9.9.9",
        "resources.limits.memory=1Gi", "imagePullSecrets[0].name=pull",
    ),
}  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_renders_objects_valid_against_kubernetes_schemas(helm: str, mode: str) -> None:
    for document in _render(*MODES[mode]):
        kubernetes_validate.validate(document, "1.37", strict=True)


def test_the_image_tag_defaults_to_the_package_version(helm: str) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    deployment = _one(_render(), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"tflaunch-operator:{__version__}"
    own = _one(_render(*MODES["own-image-and-resources"]), "Deployment")
    (container,) = own["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/ml/operator-image:9.9.9"
    assert container["resources"]["limits"]["memory"] == "1Gi"
    assert own["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "pull"}]


def test_cluster_wide_mode_grants_a_cluster_role_and_serves_every_namespace(helm: str) -> None:
    documents = _render()
    assert {"ClusterRole", "ClusterRoleBinding"} <= set(_kinds(documents))
    context = operator_command.make_context("operator", _args(documents))
    assert context.params["all_namespaces"] is True and context.params["leader_elect"] is True


def test_namespaced_mode_grants_roles_only_where_it_serves(helm: str) -> None:
    documents = _render(*MODES["namespaced"])
    assert not {"ClusterRole", "ClusterRoleBinding"} & set(_kinds(documents))
    roles = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in documents
             if d["kind"] == "Role"}  # fmt: skip
    assert roles == {
        ("team-a", "tflaunch-operator"), ("team-b", "tflaunch-operator"),
        (NS, "tflaunch-operator-leader"),
    }  # fmt: skip
    cluster_role = _one(_render(), "ClusterRole")
    for role in (d for d in documents if d["kind"] == "Role" and d["metadata"]["namespace"] != NS):
        assert role["rules"] == cluster_role["rules"]  # one list of rules for both scopes
    context = operator_command.make_context("operator", _args(documents))
    assert context.params["all_namespaces"] is False
    assert "team-a,team-b" in _args(documents)
    alone = _render(*MODES["release-namespace-only"])
    assert {d["metadata"]["namespace"] for d in alone if d["kind"] == "RoleBinding"} == {NS}


def test_metrics_service_and_optional_service_monitor(helm: str) -> None:
    service = _one(_render(), "Service")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8081, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert "ServiceMonitor" not in _kinds(_render())
    enabled = ("metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom")
    monitor = _one(_render(*enabled), "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()
    quiet = _render(*MODES["one-replica-no-metrics"])
    assert "Service" not in _kinds(quiet) and "--metrics-address" not in _args(quiet)


def test_more_than_one_replica_without_leader_election_is_refused(helm: str) -> None:
    with pytest.raises(RuntimeError, match="replicaCount > 1 needs leaderElection: true"):
        operator_manifests.template("replicaCount=2", "leaderElection=false")


def test_the_security_context_is_todays(helm: str) -> None:
    pod = _one(_render(), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
