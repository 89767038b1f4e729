"""`tflaunch tensorboard NAME` on the real API server: the TensorBoard pod is admitted in a
`restricted` Pod Security namespace, mounts the job's claim read-only, is owned by the job
(the garbage collector removes it with the job), and is not counted as a worker.

Not covered here: the port-forward itself. kwok runs no containers, so no TensorBoard
listens in the pod and no kubelet serves pods/portforward; the bridge is tested with plain
sockets (tests/cluster/test_portforward.py) and the pod runs on kind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.core import tensorboard
from tests.e2e.conftest import ControlPlane, eventually, pod_hooks, write_spec

pytestmark = pytest.mark.e2e


def test_the_tensorboard_pod_is_admitted_as_restricted_owned_by_the_job_and_collected_with_it(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    cp.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    spec = write_spec(
        tmp_path / "job.yaml", "tb", namespace, hooks=pod_hooks(run_for="forever"),
        checkpoint={"claimName": "shared-ckpt", "mountPath": "/ckpt"},
    )  # fmt: skip
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run
    run = cp.tflaunch("tensorboard", "tb", "-n", namespace, "--no-forward")
    assert run.code == 0, run
    assert "kubectl port-forward" in run.out and "pod/tb-tensorboard" in run.out

    pod = cp.get("pod", "tb-tensorboard", "-n", namespace)
    job = cp.get("job", "tb-worker", "-n", namespace)
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Job",
        "tb-worker",
        job["metadata"]["uid"],
    )
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "checkpoints"]
    assert volume["persistentVolumeClaim"] == {"claimName": "shared-ckpt", "readOnly": True}
    (container,) = pod["spec"]["containers"]
    assert container["image"] == job["spec"]["template"]["spec"]["containers"][0]["image"]
    worker_args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    logdir = worker_args[worker_args.index("--tensorboard-dir") + 1]
    assert logdir.startswith("/ckpt/tb/") and logdir.endswith("/tensorboard"), logdir
    assert container["args"][:2] == ["--logdir", logdir]
    assert {m["mountPath"]: m.get("readOnly") for m in container["volumeMounts"]}["/ckpt"] is True

    # Not one of the job's workers: status still counts two.
    status = cp.tflaunch("status", "tb", "-n", namespace)
    assert status.code == 0 and "tb-tensorboard" not in status.out, status
    # Again: the same pod, left as it is.
    again = cp.tflaunch("tensorboard", "tb", "-n", namespace, "--no-forward")
    assert again.code == 0, again
    assert (
        cp.get("pod", "tb-tensorboard", "-n", namespace)["metadata"]["uid"]
        == pod["metadata"]["uid"]
    )

    assert (deleted := cp.tflaunch("delete", "tb", "-n", namespace)).code == 0, deleted
    eventually(
        lambda: not cp.get("pods", "-n", namespace, "-l", f"{tensorboard.FOR_JOB}=tb")["items"],
        what="the garbage collector removing the TensorBoard pod with its Job", timeout=90,
    )  # fmt: skip


def test_a_job_without_a_checkpoint_claim_gets_one_line_saying_why_not(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "nopvc", namespace, hooks=pod_hooks(run_for="forever"))
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run
    run = cp.tflaunch("tensorboard", "nopvc", "-n", namespace)
    assert run.code == 2, run
    assert run.err.count("\n") == 1 and "spec.checkpoint.claimName" in run.err, run
    assert not cp.get("pods", "-n", namespace, "-l", f"{tensorboard.FOR_JOB}=nopvc")["items"]


def test_an_unknown_job_is_one_line(control_plane: ControlPlane, namespace: str) -> None:
    run = control_plane.tflaunch("tensorboard", "ghost", "-n", namespace)
    assert run.code != 0 and run.err.count("\n") == 1 and "job ghost not found" in run.err, run
