"""`tflaunch tensorboard NAME` on the real API server: the TensorBoard pod is admitted in a
`restricted` Pod Security namespace, mounts the job's claim read-only, is owned by the job
(the garbage collector removes it with the job), and is not counted as a worker.

The port-forward runs end to end through the real API server's pods/portforward: kwok's
kubelet server forwards the pod's port 6006 to a stand-in HTTP server in the test
(`ControlPlane.forward_port`; kwok runs no containers, so no TensorBoard listens in the pod).
"""

from __future__ import annotations

import http.server
import signal
import threading
import urllib.request
from pathlib import Path

import pytest

from launcher.core import tensorboard
from tests.cluster.test_portforward import HelloHandler
from tests.e2e.conftest import ControlPlane, eventually, pod_hooks, stop_process, write_spec

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


def _claim(namespace: str, name: str) -> list[dict[str, object]]:
    """A PersistentVolume bound to claim `name` (the scheduler places no pod whose claim is
    unbound): hostPath, never touched, since kwok runs no containers."""
    volume = f"pv-{namespace}"
    return [
        {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                "storageClassName": "", "hostPath": {"path": "/tmp/tflaunch-e2e-unused"},
                "claimRef": {"namespace": namespace, "name": name},
            },
        },
        {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]  # fmt: skip


def test_tensorboard_forwards_a_local_port_to_the_pod_through_the_api_server(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    cp.apply(_claim(namespace, "shared-ckpt"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HelloHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    forwarder = None
    try:
        cp.forward_port(namespace, tensorboard.PORT, server.server_address[1])
        spec = write_spec(
            tmp_path / "job.yaml", "tbf", namespace, hooks=pod_hooks(run_for="forever"),
            checkpoint={"claimName": "shared-ckpt", "mountPath": "/ckpt"},
        )  # fmt: skip
        assert (run := cp.tflaunch("submit", str(spec))).code == 0, run
        forwarder = cp.popen_tflaunch(
            "tensorboard", "tbf", "-n", namespace, "--port", "0", "--timeout", "120"
        )
        assert forwarder.stdout is not None
        said = forwarder.stdout.readline()  # once the pod is Ready and the port listens
        assert said.startswith("TensorBoard for job tbf: http://127.0.0.1:"), said
        url = said.split(": ", 1)[1].split()[0]
        for page in ("/", "/data/runs"):  # each request is a new stream through the server
            with urllib.request.urlopen(url.rstrip("/") + page, timeout=30) as response:
                assert response.read().decode().startswith(f"hello from {page}xxx")
        forwarder.send_signal(signal.SIGINT)
        assert forwarder.wait(timeout=60) == 0
    finally:
        server.shutdown()
        if forwarder is not None:
            stop_process(forwarder)
