"""`tflaunch submit` on the real API server: the Job controller creates pods whose DNS names
are exactly TF_CONFIG's hosts, a resubmit writes nothing, a changed spec is refused, and
`--replace` replaces. Pod Security admission admits our pods in a `restricted` namespace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ControlPlane, eventually, pod_hooks, write_spec

pytestmark = pytest.mark.e2e

SELECTOR = "tflaunch.dev/job-name"


def _pods(cp: ControlPlane, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cp.get("pods", "-n", namespace, "-l", f"{SELECTOR}={job}")[
        "items"
    ]
    return items


def _tf_config_hosts(pod: dict[str, Any]) -> tuple[list[str], int]:
    """The pod's TF_CONFIG with $(WORKER_INDEX) expanded as the kubelet would."""
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    index = pod["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index")
    if index is None:
        index = pod["metadata"]["labels"]["tflaunch.dev/worker-index"]
    raw = env["TF_CONFIG"]["value"].replace("$(WORKER_INDEX)", index)
    config = json.loads(raw)
    return config["cluster"]["worker"], config["task"]["index"]


def _pod_fqdn(pod: dict[str, Any], namespace: str) -> str:
    spec = pod["spec"]
    return f"{spec['hostname']}.{spec['subdomain']}.{namespace}.svc.cluster.local"


def _our_writes(cp: ControlPlane, namespace: str, job: str) -> dict[str, Any]:
    """Per object: its generation and what the server recorded of tflaunch's own writes
    (managedFields of manager tflaunch). The Job controller keeps writing the Job's status,
    so resourceVersion alone cannot tell whether we wrote."""
    found = cp.get(
        "jobs,services,networkpolicies", "-n", namespace, "-l", f"{SELECTOR}={job}",
        "--show-managed-fields",
    )  # fmt: skip
    return {
        f"{o['kind']}/{o['metadata']['name']}": (
            o["metadata"].get("generation"),
            [m for m in o["metadata"]["managedFields"] if m["manager"] == "tflaunch"],
            o["metadata"]["resourceVersion"] if o["kind"] != "Job" else "status churns",
        )
        for o in found["items"]
    }


@pytest.mark.parametrize("layout", ["indexed", "per-worker"])
def test_submitted_pods_have_the_dns_names_tf_config_lists(
    control_plane: ControlPlane, namespace: str, tmp_path: Path, layout: str
) -> None:
    cp = control_plane
    spec = write_spec(
        tmp_path / "job.yaml", "dns", namespace, workers=4, layout=layout,
        hooks=pod_hooks(run_for="forever"),
    )  # fmt: skip
    run = cp.tflaunch("submit", str(spec))
    assert run.code == 0, run

    pods = eventually(
        lambda: (p := _pods(cp, namespace, "dns")) and len(p) == 4 and p,
        what="4 worker pods created by the Job controller",
    )
    hosts_seen = set()
    for pod in pods:
        hosts, index = _tf_config_hosts(pod)
        port = hosts[index].rsplit(":", 1)[1]
        # The Job controller (indexed) or our template (per-worker) set hostname + subdomain:
        # the name this pod answers to must be the one TF_CONFIG gives its index.
        assert hosts[index] == f"{_pod_fqdn(pod, namespace)}:{port}"
        hosts_seen.add(tuple(hosts))
    assert len(hosts_seen) == 1, "every pod must get the same cluster list"
    service = cp.get("service", "dns", "-n", namespace)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert {p["spec"]["subdomain"] for p in pods} == {"dns"}


def test_resubmitting_the_same_spec_writes_nothing(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "same", namespace, hooks=pod_hooks(run_for="forever"))
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run
    before = _our_writes(cp, namespace, "same")
    assert set(before) == {"Job/same-worker", "Service/same", "NetworkPolicy/same-tf-peers"}

    again = cp.tflaunch("submit", str(spec))
    assert again.code == 0, again
    assert "nothing to do" in again.err
    assert _our_writes(cp, namespace, "same") == before


def test_a_changed_spec_is_refused_and_replace_replaces(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "chg", namespace, hooks=pod_hooks(run_for="forever"))
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run
    uid = cp.get("job", "chg-worker", "-n", namespace)["metadata"]["uid"]

    refused = cp.tflaunch("submit", str(spec), "--workers", "4")
    assert refused.code == 2, refused
    assert "--replace" in refused.err
    assert len(refused.err.strip().splitlines()) == 1
    job = cp.get("job", "chg-worker", "-n", namespace)
    assert job["spec"]["parallelism"] == 2, "nothing may be applied when refused"

    replaced = cp.tflaunch("submit", str(spec), "--workers", "4", "--replace", timeout=180)
    assert replaced.code == 0, replaced
    job = cp.get("job", "chg-worker", "-n", namespace)
    assert job["metadata"]["uid"] != uid
    assert job["spec"]["parallelism"] == 4


def test_restricted_pod_security_admits_workers_and_rejects_a_privileged_pod(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    cp.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    privileged = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged", "namespace": namespace},
        "spec": {
            "containers": [{"name": "c", "image": "x", "securityContext": {"privileged": True}}]
        },
    }
    rejected = cp.kubectl("apply", "-f", "-", stdin=json.dumps(privileged), check=False)
    assert rejected.code != 0
    assert "violates PodSecurity" in rejected.err

    spec = write_spec(tmp_path / "job.yaml", "psa", namespace, hooks=pod_hooks(run_for="forever"))
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run
    eventually(lambda: len(_pods(cp, namespace, "psa")) == 2, what="both worker pods admitted")
