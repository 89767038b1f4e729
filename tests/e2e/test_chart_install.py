"""`helm install` of charts/tflaunch-operator into the real control plane, then the operator
running a MultiWorkerJob to Succeeded with what the chart installed.

kwok runs no containers, so the chart's Deployment cannot run the operator here (its pods are
kwok's stand-ins). The chart's objects are installed for real (the API server validates and
stores them, RBAC enforces them); the operator then runs as a local process with the args of
the Deployment that the API server stored, logged in with a token of the chart's
ServiceAccount, so it has exactly the chart's permissions (cluster-wide, or Roles in the
served namespaces only) and its leader Lease Role. Only --liveness is dropped and no metrics
port is opened (fixed ports on a shared machine)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher import __version__
from tests.e2e.conftest import ROOT, ControlPlane, eventually, pod_hooks, stop_process
from tests.e2e.test_operator import _mwj, _phase_is

pytestmark = pytest.mark.e2e

CHART = ROOT / "charts" / "tflaunch-operator"
ACCOUNT = "tflaunch-operator"


def _helm_binary() -> str:
    path = subprocess.run(
        ["bash", str(ROOT / "hack/cluster.sh"), "helm"], capture_output=True, text=True
    ).stdout.strip()
    if not Path(path).exists():
        message = "helm is not built: run make cluster-build"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


class Release:
    """One `helm install` of the chart, uninstalled at the end."""

    def __init__(self, cp: ControlPlane, namespace: str, *values: str) -> None:
        self.cp, self.namespace = cp, namespace
        self.name = f"op-{uuid.uuid4().hex[:6]}"
        self.helm = _helm_binary()
        sets = [a for v in (f"nameOverride={self.name}", *values) for a in ("--set", v)]
        self.installed = self.run("install", self.name, str(CHART), *sets)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.helm, *args, "--namespace", self.namespace, "--kubeconfig",
             str(self.cp.kubeconfig)],
            capture_output=True, text=True, timeout=300, cwd=ROOT,
        )  # fmt: skip
        assert done.returncode == 0, f"helm {' '.join(args)}: {done.stdout}{done.stderr}"
        return done

    def deployment_args(self) -> list[str]:
        deployment = self.cp.get("deployment", self.name, "-n", self.namespace)
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        return list(container["args"])


def _local_args(args: list[str]) -> list[str]:
    """The Deployment's args without the ports: --liveness '' and no --metrics-address."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--liveness", "--metrics-address"):
            skip = True
        else:
            out.append(arg)
    return [*out, "--liveness", ""]


@pytest.fixture
def run_operator(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[str]] = []

    def start(release: Release) -> subprocess.Popen[str]:
        kubeconfig = release.cp.account_kubeconfig(
            ACCOUNT, release.namespace, tmp_path / "kubeconfig"
        )
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["POD_NAMESPACE"] = release.namespace  # as the Deployment sets it (the Lease's home)
        log = (tmp_path / "operator.log").open("w")
        process = subprocess.Popen(
            [sys.executable, "-m", "launcher", "operator",
             *_local_args(release.deployment_args()), "--kubeconfig", str(kubeconfig)],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, text=True,
        )  # fmt: skip
        started.append(process)
        return process

    yield start
    for process in started:
        stop_process(process)


def _can(cp: ControlPlane, namespace: str, verb: str, resource: str, where: str) -> bool:
    account = f"system:serviceaccount:{namespace}:{ACCOUNT}"
    answer = cp.kubectl("auth", "can-i", verb, resource, "-n", where, "--as", account, check=False)
    return answer.out.strip() == "yes"


def test_helm_install_cluster_wide_then_the_operator_runs_a_job_to_succeeded(
    control_plane: ControlPlane, namespace: str, run_operator: Any, tmp_path: Path
) -> None:
    cp = control_plane
    release = Release(cp, namespace)
    assert "STATUS: deployed" in release.installed.stdout
    eventually(
        lambda: cp.kubectl("get", "crd", "multiworkerjobs.tflaunch.dev", check=False).code == 0,
        what="the chart's CRD",
    )
    deployment = cp.get("deployment", release.name, "-n", namespace)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"tflaunch-operator:{__version__}"
    assert cp.get("clusterrole", release.name)["rules"]
    assert cp.get("service", f"{release.name}-metrics", "-n", namespace)
    assert "--all-namespaces" in release.deployment_args()
    assert _can(cp, namespace, "create", "jobs.batch", "default")  # cluster-wide
    assert not _can(cp, namespace, "get", "secrets", namespace)  # and nothing more
    run_operator(release)
    cp.apply(_mwj("chart", namespace, pod_hooks(run_for="2s")))
    eventually(_phase_is(cp, "chart", namespace, "Succeeded"), what="phase Succeeded", timeout=120)
    lease = cp.get("lease", "tflaunch-operator", "-n", namespace)  # the chart's leader Role
    assert lease["spec"]["holderIdentity"]
    release.run("uninstall", release.name)
    eventually(
        lambda: cp.kubectl("get", "clusterrole", release.name, check=False).code != 0,
        what="the ClusterRole uninstalled",
    )


def test_helm_install_namespaced_grants_only_the_served_namespace(
    control_plane: ControlPlane, namespace: str, run_operator: Any
) -> None:
    cp = control_plane
    release = Release(cp, namespace, "watch.allNamespaces=false", "replicaCount=1")
    assert cp.kubectl("get", "clusterrole", release.name, check=False).code != 0
    assert _can(cp, namespace, "create", "jobs.batch", namespace)
    assert not _can(cp, namespace, "list", "jobs.batch", "default")
    args = release.deployment_args()
    assert "--all-namespaces" not in args and args[args.index("--namespace") + 1] == namespace
    run_operator(release)
    cp.apply(_mwj("scoped", namespace, pod_hooks(run_for="2s")))
    eventually(_phase_is(cp, "scoped", namespace, "Succeeded"), what="phase Succeeded", timeout=120)
    release.run("uninstall", release.name)


def test_the_optional_service_monitor_is_accepted_by_the_prometheus_operators_crd(
    control_plane: ControlPlane, namespace: str
) -> None:
    cp = control_plane
    fetched = subprocess.run(
        ["bash", str(ROOT / "hack/upstream-crds.sh")], capture_output=True, text=True, timeout=1800
    )
    assert fetched.returncode == 0, fetched.stderr
    cp.kubectl("apply", "--server-side", "-f", str(Path(fetched.stdout.strip()) / "prometheus"))
    cp.wait_established("servicemonitors.monitoring.coreos.com")
    release = Release(
        cp, namespace, "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prometheus",
    )  # fmt: skip
    # helm install lets the server prune unknown fields; kubectl's strict field validation
    # does not, so every field of the chart's ServiceMonitor is one the CRD knows.
    manifest = release.run("get", "manifest", release.name).stdout
    monitors = [d for d in yaml.safe_load_all(manifest) if d and d["kind"] == "ServiceMonitor"]
    strict = cp.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-f", "-",
        stdin=yaml.safe_dump_all(monitors),
    )  # fmt: skip
    assert "servicemonitor" in strict.out, strict
    monitor = cp.get("servicemonitor", release.name, "-n", namespace)
    service = cp.get("service", f"{release.name}-metrics", "-n", namespace)
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [
        service["spec"]["ports"][0]["name"]
    ]
    release.run("uninstall", release.name)
