"""The TensorBoard pod of a job (pure): derived from the job's own Job object, hardened like
its workers, reading the claim read-only, owned by the job. (Admitted by a real API server
under restricted Pod Security: tests/e2e/test_tensorboard.py.)"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import socket
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest

from launcher.cli.main import run
from launcher.core import labels, render, tensorboard
from launcher.core.load import load_job


def _worker_job(**sets: object) -> dict:
    job = load_job(None, [("spec.checkpoint.claimName", "ckpt"), *sets.items()])
    (worker,) = [o for o in render.render(job) if o["kind"] == "Job"]
    worker["metadata"]["uid"] = "job-uid"
    return worker


def test_the_pod_reads_the_claim_read_only_where_the_chief_writes_and_is_owned_by_the_job():
    worker = _worker_job()
    pod = tensorboard.tensorboard_pod("mnist", worker)
    kubernetes_validate.validate(pod, "1.29", strict=True)
    (container,) = pod["spec"]["containers"]
    assert container["args"][:2] == ["--logdir", "/checkpoints/mnist/tensorboard"]
    assert container["image"] == worker["spec"]["template"]["spec"]["containers"][0]["image"]
    (claim,) = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claim["persistentVolumeClaim"] == {"claimName": "ckpt", "readOnly": True}
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
    assert mounts == {"/tmp": False, "/checkpoints": True}
    assert pod["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "mnist-worker", "uid": "job-uid"}
    ]


def test_it_is_hardened_exactly_like_the_workers():
    worker = _worker_job()
    template = worker["spec"]["template"]["spec"]
    pod = tensorboard.tensorboard_pod("mnist", worker)["spec"]
    assert pod["securityContext"] == template["securityContext"]
    assert pod["containers"][0]["securityContext"] == template["containers"][0]["securityContext"]
    assert pod["automountServiceAccountToken"] is False


def test_it_is_not_labelled_as_one_of_the_jobs_pods():
    pod = tensorboard.tensorboard_pod("mnist", _worker_job())
    selector = labels.job_labels("mnist")
    assert not selector.items() <= pod["metadata"]["labels"].items()
    assert pod["metadata"]["labels"][tensorboard.FOR_JOB] == "mnist"


def test_an_operators_job_is_owned_by_its_multiworkerjob_which_outlives_restarts():
    worker = copy.deepcopy(_worker_job())
    mwj = {"apiVersion": "tflaunch.dev/v1alpha1", "kind": "MultiWorkerJob", "name": "mnist",
           "uid": "mwj-uid", "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    worker["metadata"]["ownerReferences"] = [mwj]
    (owner,) = tensorboard.tensorboard_pod("mnist", worker)["metadata"]["ownerReferences"]
    assert owner == {k: mwj[k] for k in ("apiVersion", "kind", "name", "uid")}


def test_a_job_without_a_claim_has_no_tensorboard_pod():
    job = load_job(None)
    (worker,) = [o for o in render.render(job) if o["kind"] == "Job"]
    with pytest.raises(tensorboard.NoTensorBoard, match=r"spec\.checkpoint\.claimName"):
        tensorboard.tensorboard_pod("mnist", worker)


def test_a_local_run_without_event_files_says_what_to_do(tmp_path, capsys):
    assert run(["tensorboard", "mnist", "--workdir", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tflaunch local" in err, err


def test_a_local_run_without_tensorboard_installed_says_how_to_install_it(
    tmp_path, capsys, monkeypatch
):
    (tmp_path / "tensorboard").mkdir()
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorboard" else real(name, *a),
    )
    assert run(["tensorboard", "mnist", "--workdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'tflaunch[tensorboard]'" in err, err


def test_the_default_workdir_is_the_local_runs_and_otherwise_the_cluster(tmp_path, monkeypatch):
    from launcher.cli.tensorboard_cmd import local_logdir

    monkeypatch.chdir(tmp_path)
    assert local_logdir("mnist", None) is None
    (tmp_path / "tflaunch-runs" / "mnist").mkdir(parents=True)
    assert local_logdir("mnist", None) == Path("tflaunch-runs/mnist/tensorboard")


def test_no_local_run_here_and_no_kubeconfig_names_both_ways(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not where `tflaunch local` ran: no ./tflaunch-runs/mnist
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    assert run(["tensorboard", "mnist"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no kubeconfig" in err, err
    assert "tflaunch-runs/mnist" in err and "--workdir" in err, err


def test_tensorboard_listens_on_the_pods_loopback_only_and_its_probe_dials_there():
    """No authentication: only `tflaunch tensorboard`'s port-forward (which the runtime
    connects to the pod's localhost) may reach it, not other pods (issue 27 item 18)."""
    (container,) = tensorboard.tensorboard_pod("mnist", _worker_job())["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--host") + 1] == "127.0.0.1"
    probe = container["readinessProbe"]
    assert "tcpSocket" not in probe and "httpGet" not in probe  # those dial the pod's IP
    command = probe["exec"]["command"]
    assert command[:2] == ["python", "-c"]
    with (
        socket.create_server(("127.0.0.1", tensorboard.PORT))
        if _free(tensorboard.PORT)
        else (contextlib.nullcontext())
    ):
        ran = subprocess.run([sys.executable, "-c", command[2]], capture_output=True, timeout=30)
    assert ran.returncode == 0, ran.stderr


def _free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0
