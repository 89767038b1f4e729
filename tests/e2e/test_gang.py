"""spec.gang on the real API server, against the gang schedulers' own CRDs taken from their Go
modules at test time (hack/upstream-crds.sh: Kueue v0.17.0's, scheduler-plugins' Coscheduling
PodGroup, Volcano's PodGroup written by controller-gen from volcano.sh/apis). The API server
validates our PodGroups against those schemas, the Job controller creates the pods and the
garbage collector deletes the PodGroup with its owner. No gang scheduler runs here (kwok has
no Volcano or Kueue controller): what is asserted is what each one would read."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import test_operator
from tests.e2e.conftest import ROOT, ControlPlane, eventually, pod_hooks, write_spec
from tests.e2e.test_operator import Operator, _mwj, _phase_is

pytestmark = pytest.mark.e2e
operator = test_operator.operator  # the operator fixture (its own process) in this module too

VOLCANO = "podgroups.scheduling.volcano.sh"
COSCHEDULING = "podgroups.scheduling.x-k8s.io"


def _install_gang_crds(cp: ControlPlane) -> Path:
    fetched = subprocess.run(
        ["bash", str(ROOT / "hack/upstream-crds.sh")], capture_output=True, text=True, timeout=1800
    )
    assert fetched.returncode == 0, fetched.stderr
    where = Path(fetched.stdout.strip())
    for project in ("kueue", "volcano", "coscheduling"):
        cp.kubectl("apply", "--server-side", "-f", str(where / project))
    cp.wait_established(VOLCANO, COSCHEDULING, "localqueues.kueue.x-k8s.io")
    return where


@pytest.fixture(scope="module")
def gang_crds(control_plane: ControlPlane) -> Path:
    return _install_gang_crds(control_plane)


def _pods(cp: ControlPlane, namespace: str, count: int) -> list[dict[str, Any]]:
    return eventually(
        lambda: (lambda items: items if len(items) == count else None)(
            cp.get("pods", "-n", namespace)["items"]
        ),
        what=f"{count} worker pods",
    )


def _gone(cp: ControlPlane, resource: str, name: str, namespace: str) -> bool:
    found = cp.kubectl("get", resource, name, "-n", namespace, "--ignore-not-found", "-o", "name")
    return found.out.strip() == ""


def _events(cp: ControlPlane, name: str, namespace: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={name},involvedObject.kind=MultiWorkerJob"
    return list(cp.get("events", "-n", namespace, "--field-selector", selector)["items"])


def test_without_the_schedulers_crds_nothing_is_applied_and_the_operator_says_why(
    control_plane: ControlPlane, operator: Operator, namespace: str, tmp_path: Path
) -> None:
    # First in this module: the CRDs are not installed yet (and removed if a cluster reused
    # from an earlier run has them); installed again at the end, whatever the outcome.
    cp = control_plane
    cp.kubectl("delete", "crd", VOLCANO, COSCHEDULING, "--ignore-not-found", "--wait")
    try:
        spec = write_spec(tmp_path / "job.yaml", "nc", namespace, gang="coscheduling")
        refused = cp.tflaunch("submit", str(spec))
        assert refused.code != 0 and len(refused.err.strip().splitlines()) == 1, refused
        assert (
            "PodGroup (scheduling.x-k8s.io/v1alpha1) is not served by this cluster: spec.gang "
            "needs its scheduler's CRDs installed" in refused.err
        ), refused
        assert "set spec.gang: none; nothing was applied" in refused.err, refused
        assert cp.get("jobs,services,networkpolicies", "-n", namespace)["items"] == []

        cp.apply(_mwj("nco", namespace, pod_hooks(run_for="2s"), gang="coscheduling"))
        said = eventually(
            lambda: [
                e for e in _events(cp, "nco", namespace)
                if "PodGroup (scheduling.x-k8s.io/v1alpha1) is not served" in e["message"]
            ],
            what="the operator's event saying the PodGroup's CRD is missing",
        )  # fmt: skip
        assert said[0]["type"] == "Warning" and "spec.gang: none" in said[0]["message"]
        assert cp.get("jobs", "-n", namespace)["items"] == []  # no worker without its gang
    finally:
        _install_gang_crds(cp)
    # The operator keeps retrying: with the CRDs installed the same job runs to the end.
    eventually(_phase_is(cp, "nco", namespace, "Succeeded"), what="phase Succeeded", timeout=150)
    assert cp.get(COSCHEDULING, "nco", "-n", namespace)["spec"]["minMember"] == 2


@pytest.mark.parametrize("layout", ["indexed", "per-worker"])
def test_volcano_podgroup_of_all_workers_deleted_with_the_job(
    control_plane: ControlPlane, gang_crds: Path, namespace: str, tmp_path: Path, layout: str
) -> None:
    cp = control_plane
    spec = write_spec(
        tmp_path / "job.yaml", "vc", namespace, workers=3, gang="volcano", queueName="research",
        layout=layout, trainer={"globalBatchSize": 3},
    )  # fmt: skip
    submitted = cp.tflaunch("submit", str(spec))
    assert submitted.code == 0, submitted
    group = cp.get(VOLCANO, "vc", "-n", namespace)
    assert group["spec"]["minMember"] == 3 and group["spec"]["queue"] == "research"
    owners = group["metadata"]["ownerReferences"]
    assert [o["kind"] for o in owners] == ["Job"]
    for pod in _pods(cp, namespace, 3):
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "vc"
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["status"]["phase"] == "Pending"  # no Volcano here: nobody binds them
    deleted = cp.tflaunch("delete", "vc", "-n", namespace)
    assert deleted.code == 0, deleted
    eventually(lambda: _gone(cp, VOLCANO, "vc", namespace), what="the PodGroup deleted (GC)")


def test_coscheduling_podgroup_and_pod_label(
    control_plane: ControlPlane, gang_crds: Path, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "cs", namespace, workers=2, gang="coscheduling")
    submitted = cp.tflaunch("submit", str(spec))
    assert submitted.code == 0, submitted
    group = cp.get(COSCHEDULING, "cs", "-n", namespace)
    assert group["spec"]["minMember"] == 2
    assert [o["kind"] for o in group["metadata"]["ownerReferences"]] == ["Job"]
    for pod in _pods(cp, namespace, 2):
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "cs"
    again = cp.tflaunch("submit", str(spec))  # the same spec twice writes nothing
    assert again.code == 0 and "podgroup/cs unchanged" in again.out, again


def test_kueue_one_suspended_indexed_job_with_the_queue_label(
    control_plane: ControlPlane, gang_crds: Path, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    cp.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "team-a", "namespace": namespace},
            "spec": {"clusterQueue": "cluster"},
        }
    )
    spec = write_spec(
        tmp_path / "job.yaml", "kq", namespace, gang="kueue", queueName="team-a",
        hooks=pod_hooks(run_for="1s"),
    )  # fmt: skip
    submitted = cp.tflaunch("submit", str(spec))
    assert submitted.code == 0, submitted
    (job,) = cp.get("jobs", "-n", namespace)["items"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["suspend"] is True and job["spec"]["completionMode"] == "Indexed"
    assert cp.get("pods", "-n", namespace)["items"] == []  # held until Kueue admits it
    # What Kueue does on admission: resume the one Job; then all its pods start together.
    cp.kubectl("patch", "job", "kq-worker", "-n", namespace, "-p", '{"spec":{"suspend":false}}')
    assert len(_pods(cp, namespace, 2)) == 2
    resubmitted = cp.tflaunch("submit", str(spec))  # does not suspend it again
    assert resubmitted.code == 0, resubmitted
    assert cp.get("job", "kq-worker", "-n", namespace)["spec"]["suspend"] is False


def test_kueue_with_the_per_worker_layout_is_refused_and_nothing_applied(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(
        tmp_path / "job.yaml", "kp", namespace, gang="kueue", queueName="q", layout="per-worker"
    )
    refused = cp.tflaunch("submit", str(spec))
    assert refused.code == 2, refused
    assert "spec.layout: must be indexed with gang: kueue" in refused.err, refused
    assert len(refused.err.strip().splitlines()) == 1 and "Traceback" not in refused.err
    assert cp.get("all", "-n", namespace)["items"] == []


def test_the_operator_owns_the_podgroup_and_runs_the_gang_to_succeeded(
    control_plane: ControlPlane, gang_crds: Path, operator: Operator, namespace: str
) -> None:
    cp = control_plane
    cp.apply(_mwj("og", namespace, pod_hooks(run_for="2s"), gang="coscheduling"))
    group = eventually(
        lambda: cp.kubectl(
            "get", COSCHEDULING, "og", "-n", namespace, "-o", "json", check=False
        ).out.strip(),
        what="the operator's PodGroup",
    )
    assert '"minMember": 2' in group
    mwj_uid = cp.get("mwj", "og", "-n", namespace)["metadata"]["uid"]
    owners = cp.get(COSCHEDULING, "og", "-n", namespace)["metadata"]["ownerReferences"]
    assert [(o["kind"], o["uid"]) for o in owners] == [("MultiWorkerJob", mwj_uid)]
    eventually(_phase_is(cp, "og", namespace, "Succeeded"), what="phase Succeeded", timeout=120)
    cp.kubectl("delete", "mwj", "og", "-n", namespace)
    eventually(lambda: _gone(cp, COSCHEDULING, "og", namespace), what="the PodGroup deleted")


def test_the_operators_podgroup_follows_an_edited_worker_count(
    control_plane: ControlPlane, gang_crds: Path, operator: Operator, namespace: str
) -> None:
    # Jobs recreated for an edit (while suspended) with a PodGroup left at the old minMember
    # would never be complete: the operator applies it again, it does not only create it.
    cp = control_plane
    cp.apply(_mwj("oe", namespace, pod_hooks(run_for="2s"), gang="coscheduling", suspend=True))
    eventually(
        lambda: cp.kubectl("get", COSCHEDULING, "oe", "-n", namespace, check=False).code == 0,
        what="the operator's PodGroup",
    )
    assert cp.get(COSCHEDULING, "oe", "-n", namespace)["spec"]["minMember"] == 2
    patch = '{"spec":{"workers":4,"trainer":{"globalBatchSize":256}}}'
    cp.kubectl("patch", "mwj", "oe", "-n", namespace, "--type=merge", "-p", patch)
    eventually(
        lambda: cp.get(COSCHEDULING, "oe", "-n", namespace)["spec"]["minMember"] == 4,
        what="minMember 4 after the edit",
    )
    completions = ("get", "job", "oe-worker", "-n", namespace, "--ignore-not-found",
                   "-o", "jsonpath={.spec.completions}")  # fmt: skip
    eventually(
        lambda: cp.kubectl(*completions).out.strip() == "4",
        what="the Job recreated for 4 workers",
    )
