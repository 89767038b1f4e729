"""The TensorBoard pod of a job on a cluster, derived from the job's own Job object.

Pure: the worker Job as the API server returned it in, a Pod (plain dict) out. Everything
comes from what the job really runs, not from a spec file: the image (the trainer image has
TensorBoard, with TensorFlow), its pull secrets, the checkpoint claim and where it is mounted,
and the `--tensorboard-dir` the chief writes to. A job whose checkpoints live in an emptyDir
has nothing another pod could read: `NoTensorBoard`, which says how to get one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from launcher.core import contract, labels, render, workload
from launcher.core.errors import ExitStatus, TflaunchError

PORT = 6006
"""TensorBoard's own default port, in the pod and (when free) on this machine."""
HOST = "127.0.0.1"
"""Where TensorBoard listens in its pod: loopback only. `tflaunch tensorboard` reaches it
through the API server's port-forward, which the container runtime connects to the pod's
localhost; no other pod (TensorBoard has no authentication) reaches it."""
COMPONENT = "tensorboard"
FOR_JOB = "tflaunch.dev/tensorboard-for"
"""Label naming the job a TensorBoard pod belongs to (not `labels.JOB_NAME`: the job's
selector must keep matching its workers only)."""
CHECKPOINT_VOLUME = "checkpoints"
TRAINER_CONTAINER = "trainer"


class NoTensorBoard(TflaunchError):
    """The job has no event files another pod can read."""

    exit_status = ExitStatus.BAD_INPUT


def pod_name(job: str) -> str:
    return f"{job}-tensorboard"


def pod_labels(job: str) -> dict[str, str]:
    return {
        labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
        labels.COMPONENT: COMPONENT,
        FOR_JOB: job,
    }


def _flag(args: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return str(args[i + 1])
        if arg.startswith(f"{flag}="):
            return arg.split("=", 1)[1]
    return None


def owner_of(worker_job: Mapping[str, Any]) -> dict[str, Any]:
    """Who the TensorBoard pod belongs to: the MultiWorkerJob that controls the Job (an
    operator's job: its Jobs are recreated on every group restart), else the Job itself.
    Not a controller reference: the pod is no Job's worker."""
    meta = worker_job["metadata"]
    for reference in meta.get("ownerReferences") or ():
        if reference.get("controller") and reference.get("kind") == "MultiWorkerJob":
            return {k: reference[k] for k in ("apiVersion", "kind", "name", "uid")}
    return {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"]}


def tensorboard_pod(job: str, worker_job: Mapping[str, Any]) -> dict[str, Any]:
    """The Pod that serves `job`'s event files, from one of its worker Jobs.

    Raises:
        NoTensorBoard: no checkpoint claim, or workers that write no event files.
    """
    pod = worker_job["spec"]["template"]["spec"]
    volume: Mapping[str, Any] = next(
        (v for v in pod.get("volumes") or () if v["name"] == CHECKPOINT_VOLUME), {}
    )
    claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
    if not claim:
        raise NoTensorBoard(
            f"job {job} keeps its checkpoints and TensorBoard files in an emptyDir, which no "
            "other pod can read; set spec.checkpoint.claimName (a ReadWriteMany PVC) and "
            "submit it again to use tflaunch tensorboard"
        )
    containers = pod.get("containers") or []
    trainer = next((c for c in containers if c["name"] == TRAINER_CONTAINER), containers[0])
    argv = [*(trainer.get("command") or []), *(trainer.get("args") or [])]
    model_dir = _flag(argv, "--model-dir")
    # The built-in trainer's flag; a program of your own may write there (beside the model).
    logdir = _flag(argv, "--tensorboard-dir") or (model_dir and workload.tensorboard_dir(model_dir))
    if not logdir:
        raise NoTensorBoard(
            f"job {job}'s workers write no TensorBoard files (neither --tensorboard-dir nor "
            "--model-dir: submitted by an older tflaunch); submit it again"
        )
    mount = next(
        m["mountPath"] for m in trainer.get("volumeMounts") or () if m["name"] == CHECKPOINT_VOLUME
    )
    return render.render_template(
        "tensorboard.yaml.j2",
        {
            "pod_name": pod_name(job),
            "namespace": worker_job["metadata"]["namespace"],
            "labels": pod_labels(job),
            "owner": owner_of(worker_job),
            "image": trainer["image"],
            "image_pull_policy": trainer.get("imagePullPolicy") or "IfNotPresent",
            "image_pull_secrets": list(pod.get("imagePullSecrets") or ()),
            "run_as_user": contract.TRAINER_UID,
            "port": PORT,
            "args": ["--logdir", logdir, "--host", HOST, "--port", str(PORT)],
            "probe": [
                "python",
                "-c",
                f"import socket; socket.create_connection(({HOST!r}, {PORT}), 2).close()",
            ],
            "mount_path": mount,
            "claim_name": claim,
        },
    )
