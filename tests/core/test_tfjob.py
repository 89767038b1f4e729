"""Kubeflow TFJob manifests read into a MultiWorkerJob: what is carried, what is refused by
name (exit 2, nothing rendered), and the TF_CONFIG against training-operator v1.9's goldens."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from launcher.api.identity import API_VERSION, KIND
from launcher.cli.main import cli, run
from launcher.core import load, render, restart, tfconfig, tfjob
from launcher.core.errors import SpecError

DATA = Path(__file__).parents[1] / "data" / "tfjob"

TFJOB: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "TFJob",
    "metadata": {"name": "multi-worker", "namespace": "team", "labels": {"team": "a"}},
    "spec": {
        "runPolicy": {
            "cleanPodPolicy": "None",
            "ttlSecondsAfterFinished": 600,
            "activeDeadlineSeconds": 3600,
            "suspend": False,
            "schedulingPolicy": {"queue": "user-queue", "minAvailable": 3, "priorityClass": "hi"},
        },
        "tfReplicaSpecs": {
            "Worker": {
                "replicas": 3,
                "restartPolicy": "OnFailure",
                "template": {
                    "metadata": {"annotations": {"a": "b"}},
                    "spec": {
                        "nodeSelector": {"pool": "gpu"},
                        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                        "containers": [
                            {
                                "name": "tensorflow",
                                "image": "registry.example/train:1",
                                "command": ["python", "/train/train.py"],
                                "args": ["--epochs", "2"],
                                "env": [{"name": "LR", "value": "0.1"}],
                                "ports": [{"name": "tfjob-port", "containerPort": 2345}],
                                "resources": {
                                    "requests": {"cpu": "2"},
                                    "limits": {"nvidia.com/gpu": 1, "memory": "8Gi"},
                                },
                                "volumeMounts": [{"name": "training", "mountPath": "/train"}],
                            }
                        ],
                        "volumes": [
                            {"name": "training", "persistentVolumeClaim": {"claimName": "data"}}
                        ],
                    },
                },
            }
        },
    },
}


def _write(tmp_path: Path, document: dict[str, Any]) -> str:
    path = tmp_path / "tfjob.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def _container(document: dict[str, Any]) -> dict[str, Any]:
    return document["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


def test_a_worker_tfjob_carries_every_field_onto_the_multiworkerjob(tmp_path: Path) -> None:
    job = load.load_job(_write(tmp_path, TFJOB))
    spec = job.spec
    assert (job.name, job.namespace, spec.workers, spec.image) == (
        "multi-worker",
        "team",
        3,
        "registry.example/train:1",
    )
    assert spec.command == ("python", "/train/train.py") and spec.args == ("--epochs", "2")
    assert spec.env == {"LR": "0.1"} and spec.port == 2345 and spec.gpus_per_worker == 1
    assert (spec.resources.requests.cpu, spec.resources.limits.memory) == ("2", "8Gi")
    assert (spec.resources.requests.memory, spec.resources.limits.cpu) == (None, None)
    assert (spec.checkpoint.claim_name, spec.checkpoint.mount_path) == ("data", "/train")
    assert spec.node_selector == {"pool": "gpu"} and spec.tolerations[0].operator == "Exists"
    assert spec.labels == {"team": "a"} and spec.annotations == {"a": "b"}
    assert (spec.ttl_seconds_after_finished, spec.active_deadline_seconds) == (600, 3600)
    assert (spec.gang, spec.queue_name, spec.priority_class_name) == ("kueue", "user-queue", "hi")


def test_restart_policy_never_without_a_backoff_limit_restarts_nothing() -> None:
    never = copy.deepcopy(TFJOB)
    never["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"
    assert tfjob.to_multiworkerjob(never)["spec"]["backoffLimit"] == 0
    never["spec"]["runPolicy"]["backoffLimit"] = 4
    assert tfjob.to_multiworkerjob(never)["spec"]["backoffLimit"] == 4


def test_the_port_defaults_to_2222_like_training_operators() -> None:
    plain = copy.deepcopy(TFJOB)
    del _container(plain)["ports"]
    assert load.job_from_document(tfjob.to_multiworkerjob(plain)).spec.port == 2222


def _refusal(change: Any) -> str:
    bad = copy.deepcopy(TFJOB)
    change(bad)
    with pytest.raises(SpecError) as refused:
        tfjob.to_multiworkerjob(bad)
    return str(refused.value.field)


def _replica(name: str) -> Any:
    def add(doc: dict[str, Any]) -> None:
        doc["spec"]["tfReplicaSpecs"][name] = {"replicas": 1}

    return add


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (_replica("PS"), "spec.tfReplicaSpecs.PS"),
        (_replica("Chief"), "spec.tfReplicaSpecs.Chief.template.spec.containers"),
        (_replica("Evaluator"), "spec.tfReplicaSpecs.Evaluator"),
        (_replica("Launcher"), "spec.tfReplicaSpecs.Launcher"),
        (
            lambda d: _container(d).update(name="main"),
            "spec.tfReplicaSpecs.Worker.template.spec.containers",
        ),
        (
            lambda d: _container(d).pop("image"),
            "spec.tfReplicaSpecs.Worker.template.spec.containers[tensorflow].image",
        ),
        (
            lambda d: _container(d).update(securityContext={"runAsUser": 0}),
            "spec.tfReplicaSpecs.Worker.template.spec.containers[tensorflow].securityContext",
        ),
        (
            lambda d: _container(d)["env"].append({"name": "TF_CONFIG", "value": "{}"}),
            "spec.tfReplicaSpecs.Worker.template.spec.containers[tensorflow].env[1]",
        ),
        (
            lambda d: d["spec"]["runPolicy"].update(cleanPodPolicy="All"),
            "spec.runPolicy.cleanPodPolicy",
        ),
        (
            lambda d: d["spec"]["runPolicy"]["schedulingPolicy"].update(minAvailable=1),
            "spec.runPolicy.schedulingPolicy.minAvailable",
        ),
        (lambda d: d["spec"].update(successPolicy="ChiefOnly"), "spec.successPolicy"),
        (lambda d: d["spec"].update(enableDynamicWorker=True), "spec.enableDynamicWorker"),
        (
            lambda d: d["spec"]["runPolicy"].update(managedBy="kubeflow.org/training-operator"),
            "spec.runPolicy.managedBy",
        ),
    ],
)
def test_what_tflaunch_cannot_honour_is_refused_by_name(change: Any, field: str) -> None:
    assert _refusal(change) == field


@pytest.mark.parametrize("command", ["render", "validate", "tfconfig", "convert"])
def test_a_ps_tfjob_is_exit_2_with_one_line_saying_why_and_nothing_rendered(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = copy.deepcopy(TFJOB)
    bad["spec"]["tfReplicaSpecs"]["PS"] = {"replicas": 1}
    assert run([command, _write(tmp_path, bad)]) == 2
    printed = capsys.readouterr()
    assert printed.out == ""
    lines = printed.err.strip().splitlines()
    assert len(lines) == 1 and "spec.tfReplicaSpecs.PS" in lines[0]
    assert "ParameterServerStrategy" in lines[0] and "MultiWorkerMirroredStrategy" in lines[0]


def _trainer(objects: list[dict[str, Any]]) -> dict[str, Any]:
    job = next(o for o in objects if o["kind"] == "Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_kubeflows_unchanged_example_runs_its_images_entrypoint_with_the_guarantees_said(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(cli, ["render", str(DATA / "multi_worker_tfjob.yaml")])

    assert result.exit_code == 0, result.output
    (note,) = result.stderr.splitlines()
    assert note.startswith("tflaunch: note: spec.entrypoint: image runs the image's own ENTRYPOINT")
    assert "TF_CONFIG" in note and "restart in place" in note and "do not" in note
    container = _trainer(list(yaml.safe_load_all(result.stdout)))
    assert "command" not in container and "args" not in container  # ENTRYPOINT and CMD run
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert json.loads(env["TF_CONFIG"].replace("$(WORKER_INDEX)", "1"))["task"] == {
        "type": "worker",
        "index": 1,
    }
    assert env["TF_USE_LEGACY_KERAS"] == "1"  # the example's tf.keras fit on two workers


def test_a_tfjob_with_args_and_no_command_gives_the_args_as_the_images_cmd(
    tmp_path: Path,
) -> None:
    document = copy.deepcopy(TFJOB)
    _container(document).pop("command")

    job = load.load_job(_write(tmp_path, document))

    assert job.spec.entrypoint == "image" and job.spec.command == ()
    container = _trainer(render.render(job))
    assert "command" not in container and container["args"] == ["--epochs", "2"]


def test_the_images_entrypoint_is_refused_where_the_worker_wrapper_is_needed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["local", str(DATA / "multi_worker_tfjob.yaml")]) == 2
    assert "spec.entrypoint: image runs only in pods" in capsys.readouterr().err
    for field, value, says in [
        ("restart", "inPlace", "spec.restart: inPlace is done by the worker wrapper"),
        ("stallTimeoutSeconds", 60, "spec.stallTimeoutSeconds: is the worker wrapper's"),
        ("command", ["python", "/t.py"], "spec.entrypoint: image runs the image's ENTRYPOINT"),
    ]:
        spec = {"image": "train:1", "workers": 2, "entrypoint": "image", field: value}
        document = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "j"}}
        path = tmp_path / f"{field}.yaml"
        path.write_text(yaml.safe_dump({**document, "spec": spec}))

        assert run(["validate", "--no-schema", str(path)]) == 2
        printed = capsys.readouterr()
        assert printed.out == "" and printed.err.count("\n") == 1, printed
        assert says in printed.err, printed.err


def test_a_tfjob_restarts_in_place_with_its_command_and_by_new_pods_without_one(
    tmp_path: Path,
) -> None:
    """restartPolicy becomes a group restart, written nowhere: the default resolves it."""
    example = yaml.safe_load((DATA / "multi_worker_tfjob.yaml").read_text())
    unwrapped = load.load_job(str(DATA / "multi_worker_tfjob.yaml"))
    assert unwrapped.spec.restart is None and restart.mode(unwrapped.spec) == "recreate"
    assert "restartPolicyRules" not in _trainer(render.render(unwrapped))

    _container(example)["command"] = ["python", "/multi_worker_strategy-with-keras.py"]
    wrapped = load.load_job(_write(tmp_path, example))
    assert wrapped.spec.restart is None and restart.mode(wrapped.spec) == "inPlace"
    assert "--restart-in-place" in _trainer(render.render(wrapped))["args"]


def test_kubeflows_example_with_its_command_renders_and_validates(tmp_path: Path) -> None:
    example = yaml.safe_load((DATA / "multi_worker_tfjob.yaml").read_text())
    _container(example)["command"] = ["python", "/multi_worker_strategy-with-keras.py"]
    result = CliRunner().invoke(cli, ["validate", _write(tmp_path, example)])
    assert result.exit_code == 0, result.output
    job = load.load_job(_write(tmp_path, example))
    assert (job.spec.workers, job.spec.gpus_per_worker, job.spec.checkpoint.claim_name) == (
        2,
        1,
        "strategy-volume",
    )
    assert any(o["kind"] == "Service" for o in render.render(job))


def test_convert_prints_a_valid_multiworkerjob_with_its_differences_as_comments(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(cli, ["convert", _write(tmp_path, TFJOB)])
    assert result.exit_code == 0, result.output
    comments = [line for line in result.stdout.splitlines() if line.startswith("#")]
    assert any("restartPolicy OnFailure" in c for c in comments)
    converted = yaml.safe_load(result.stdout)
    assert converted["kind"] == "MultiWorkerJob"
    assert load.job_from_document(converted).spec.workers == 3


GOLDENS = json.loads((DATA / "training_operator_tf_configs.json").read_text())["cases"]


@pytest.mark.parametrize("case", GOLDENS, ids=lambda c: "+".join(c["replicas"]) + c["domain"])
def test_tf_config_matches_training_operators_goldens_bar_host_names(case: dict[str, Any]) -> None:
    """Each of training-operator's cases: a Worker-only job gets the same task and the same
    number of workers in cluster.worker; a job with PS or Evaluator replicas is refused."""
    doc = copy.deepcopy(TFJOB)
    doc["metadata"] = {"name": "test-tfjob", "namespace": case["namespace"]}
    for rtype, count in case["replicas"].items():
        doc["spec"]["tfReplicaSpecs"].setdefault(rtype, {})["replicas"] = count
    doc["spec"]["runPolicy"].pop("schedulingPolicy")
    if set(case["replicas"]) != {"Worker"}:
        with pytest.raises(SpecError):
            tfjob.to_multiworkerjob(doc)
        return
    job = load.job_from_document(tfjob.to_multiworkerjob(doc))
    rtype, index = case["task"]
    ours = tfconfig.job_tf_config(job, index)
    assert ours["task"] == {"type": rtype, "index": index}
    expected = json.loads(case["tf_config"]) if case["tf_config"] else None
    workers = len(expected["cluster"]["worker"]) if expected else case["replicas"]["Worker"]
    assert len(ours["cluster"]["worker"]) == workers


def test_a_tfjob_managed_by_the_tflaunch_operator_is_read_as_any_other() -> None:
    document = copy.deepcopy(TFJOB)
    document["spec"]["runPolicy"]["managedBy"] = tfjob.MANAGED_BY
    assert tfjob.to_multiworkerjob(document)["spec"]["workers"] == 3


def test_a_tfjob_without_resources_gets_no_request_it_did_not_write(tmp_path: Path) -> None:
    """Kubeflow's examples ask only `nvidia.com/gpu: 1`: tflaunch's defaults (1 CPU and 2Gi
    requested per worker) would keep one of two workers Pending on a 2-CPU node."""
    document = copy.deepcopy(TFJOB)
    _container(document)["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    job = load.load_job(_write(tmp_path, document))
    assert _trainer(render.render(job))["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
