"""The namespaced operator on the real control plane (issue 10 item 10): the RBAC of
manifests/operator/namespaced/ (generated for the test's namespace), `tflaunch operator` with
that ServiceAccount's token and TFLAUNCH_OPERATOR_NAMESPACES. It runs a MultiWorkerJob in its
namespace, leaves one in another namespace alone, and can read nothing there.

The ServiceAccount is renamed for this test: other modules of the session bind the shipped one
with the cluster-wide ClusterRole, which would hide a missing Role here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import ROOT, ControlPlane, eventually, pod_hooks
from tests.e2e.test_operator import _mwj, _phase_is

sys.path.insert(0, str(ROOT / "scripts"))
import namespaced_operator

pytestmark = pytest.mark.e2e

OPERATOR_NS = "tflaunch-system"
ACCOUNT = "tflaunch-operator-namespaced"
RUNS_ON_KWOK = ("Namespace", "ServiceAccount", "Role", "RoleBinding")


def _rbac(served: str) -> list[dict[str, Any]]:
    """The namespaced manifests for `served`, RBAC only (kwok runs no Deployment), without the
    Lease's Role (one replica here), for this test's own ServiceAccount."""
    shipped = [d for d in yaml.safe_load_all(namespaced_operator.SOURCE.read_text()) if d]
    documents = namespaced_operator.namespaced(shipped, [served])
    kept = []
    for document in documents:
        if document["kind"] not in RUNS_ON_KWOK or document["metadata"]["name"].endswith("leader"):
            continue
        if document["kind"] == "ServiceAccount":
            document["metadata"]["name"] = ACCOUNT
        for subject in document.get("subjects", []):
            subject["name"] = ACCOUNT
        kept.append(document)
    return kept


@pytest.fixture
def other(control_plane: ControlPlane) -> Iterator[str]:
    name = f"other-{uuid.uuid4().hex[:5]}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_the_namespaced_operator_runs_its_namespace_and_cannot_read_another(
    control_plane: ControlPlane, namespace: str, other: str, tmp_path: Path
) -> None:
    cp = control_plane
    cp.install_crd()
    cp.apply(_rbac(namespace))
    kubeconfig = cp.account_kubeconfig(ACCOUNT, OPERATOR_NS, tmp_path / "kubeconfig")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["TFLAUNCH_OPERATOR_NAMESPACES"] = namespace
    log = tmp_path / "operator.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "launcher", "operator", "--liveness", "",
             "--kubeconfig", str(kubeconfig)],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
        )  # fmt: skip
        try:
            cp.apply(_mwj("theirs", other, pod_hooks(run_for="2s")))
            cp.apply(_mwj("ours", namespace, pod_hooks(run_for="2s")))
            eventually(_phase_is(cp, "ours", namespace, "Succeeded"), what="Succeeded",
                       timeout=120)  # fmt: skip
            assert process.poll() is None, log.read_text()
        finally:
            process.terminate()
            process.wait(timeout=30)
    text = log.read_text()
    # It only asks for what it may. Timestamps are cut first: "20:41:49,403" is no refusal.
    messages = re.sub(r"^\S+ \S+ ", "", text, flags=re.MULTILINE).lower()
    assert "forbidden" not in messages and "403" not in messages, text
    assert not cp.get("mwj", "theirs", "-n", other).get("status"), "another namespace's job"
    assert not cp.get("jobs", "-n", other)["items"]

    as_operator = ["--kubeconfig", str(kubeconfig)]
    for verb in (
        ("get", "pods", "-n", other),
        ("get", "jobs", "-n", other),
        ("get", "mwj", "-n", other),
        ("get", "jobs", "-A"),
        ("get", "pods", "-n", "kube-system"),
    ):
        denied = cp.kubectl(*as_operator, *verb, check=False)
        assert denied.code != 0 and "forbidden" in denied.err.lower(), (verb, denied)
    logs = ["auth", "can-i", "get", "pods", "--subresource=log", "-n"]
    assert cp.kubectl(*as_operator, *logs, other, check=False).out.strip() == "no"
    assert cp.kubectl(*as_operator, *logs, namespace, check=False).out.strip() == "yes"
