"""Every pod of a TFJob gets the TF_CONFIG training-operator v1.9.3 gives it, bar the host
names: Kubeflow's examples (tests/data/tfjob/, with a Chief or Master and Workers, or Workers
alone) rendered, each pod's TF_CONFIG read back from its Job and compared, as text, with what
training-operator's own SetClusterSpec wrote for the pod of the same task (the goldens of
training_operator_pod_tf_configs.json, made by hack/tfjob-tfconfig)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from launcher.api.spec import MultiWorkerJob
from launcher.cli.main import cli, run
from launcher.core import limits, load, names, render, tfconfig
from launcher.core.errors import SpecError

DATA = Path(__file__).parents[1] / "data" / "tfjob"
GOLDENS: dict[str, dict[str, str | None]] = json.loads(
    (DATA / "training_operator_pod_tf_configs.json").read_text()
)["manifests"]
COMMAND = ["python", "/multi_worker_strategy-with-keras.py"]
"""multi_worker_tfjob.yaml's image runs its program as ENTRYPOINT; tflaunch must be told."""


def _manifest(name: str) -> dict[str, Any]:
    document = yaml.safe_load((DATA / name).read_text())
    for replica in document["spec"]["tfReplicaSpecs"].values():
        container = replica["template"]["spec"]["containers"][0]
        container.setdefault("command", COMMAND)
    return document


def _load(tmp_path: Path, document: dict[str, Any]) -> MultiWorkerJob:
    path = tmp_path / "tfjob.yaml"
    path.write_text(yaml.safe_dump(document))
    return load.load_job(str(path))


def _rendered_tf_configs(job: MultiWorkerJob) -> list[str]:
    """Each member's TF_CONFIG as its pod's environment holds it once the kubelet has expanded
    $(WORKER_INDEX) (the indexed layout's one Job serves every index)."""
    configs = []
    for obj in render.render(job):
        if obj["kind"] != "Job":
            continue
        env = {e["name"]: e for e in obj["spec"]["template"]["spec"]["containers"][0]["env"]}
        value = env["TF_CONFIG"]["value"]
        if "value" in env["WORKER_INDEX"]:
            configs.append(value)
        else:
            configs += [
                value.replace(tfconfig.INDEX_PLACEHOLDER, str(i)) for i in range(job.spec.workers)
            ]
    return configs


def _with_our_hosts(theirs: str, ours: dict[str, Any]) -> str:
    """training-operator's TF_CONFIG with each task's address swapped for ours of that task."""
    cluster = json.loads(theirs)["cluster"]
    for job_name, addresses in cluster.items():
        for i, address in enumerate(addresses):
            theirs = theirs.replace(f'"{address}"', json.dumps(ours["cluster"][job_name][i]))
    return theirs


DISTRIBUTED = [name for name, pods in GOLDENS.items() if any(pods.values())]


@pytest.mark.parametrize("manifest", DISTRIBUTED)
def test_every_pod_gets_training_operators_tf_config_bar_the_host_names(
    tmp_path: Path, manifest: str
) -> None:
    job = _load(tmp_path, _manifest(manifest))
    golden = GOLDENS[manifest]
    rendered = _rendered_tf_configs(job)
    assert len(rendered) == len(golden) == job.spec.workers
    by_task = {}
    for config in rendered:
        parsed = json.loads(config)
        task = f"{parsed['task']['type']}-{parsed['task']['index']}"
        expected = golden[task]
        assert expected is not None
        assert config == _with_our_hosts(expected, parsed)
        by_task[task] = config
    assert set(by_task) == set(golden)  # every pod of training-operator's, once


@pytest.mark.parametrize("manifest", DISTRIBUTED)
def test_tflaunch_tfconfig_prints_every_pods_tf_config_as_rendered(
    tmp_path: Path, manifest: str
) -> None:
    path = tmp_path / "tfjob.yaml"
    path.write_text(yaml.safe_dump(_manifest(manifest)))
    result = CliRunner().invoke(cli, ["tfconfig", str(path)])
    assert result.exit_code == 0, result.output
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    assert printed == [json.loads(c) for c in _rendered_tf_configs(load.load_job(str(path)))]


@pytest.mark.parametrize("manifest", ["chief_worker_tfjob.yaml", "master_worker_tfjob.yaml"])
def test_the_chief_is_tflaunchs_worker_0_and_worker_i_its_worker_i_plus_1(
    tmp_path: Path, manifest: str
) -> None:
    job = _load(tmp_path, _manifest(manifest))
    chief = job.spec.tf_config.chief
    hosts = [
        names.worker_fqdn(job.name, i, job.namespace, job.spec.cluster_domain)
        for i in range(job.spec.workers)
    ]
    configs = [tfconfig.job_tf_config(job, i) for i in range(job.spec.workers)]
    assert [c["task"] for c in configs] == [
        {"type": chief, "index": 0},
        *({"type": "worker", "index": i} for i in range(job.spec.workers - 1)),
    ]
    cluster = configs[0]["cluster"]
    assert [a.rsplit(":", 1)[0] for a in cluster[chief] + cluster["worker"]] == hosts
    jobs = [o for o in render.render(job) if o["kind"] == "Job"]
    assert [j["metadata"]["name"] for j in jobs] == [
        names.per_worker_job_name(job.name, i) for i in range(job.spec.workers)
    ]


def test_the_master_example_keeps_its_namespace_port_and_restart_policy(tmp_path: Path) -> None:
    job = _load(tmp_path, _manifest("master_worker_tfjob.yaml"))
    assert (job.namespace, job.spec.port, job.spec.workers) == ("team-a", 2345, 4)
    assert (job.spec.layout, job.spec.tf_config.chief) == ("per-worker", "master")
    assert job.spec.backoff_limit == 3  # OnFailure: tflaunch's group restarts, its default


def test_a_single_replica_job_gets_a_one_worker_tf_config_where_training_operator_sets_none(
    tmp_path: Path,
) -> None:
    """training-operator leaves TF_CONFIG out when one replica is not distributed; tflaunch
    sets it in every pod, one alone too, so a program that reads it runs the same everywhere
    (docs/migrating-from-tfjob.md)."""
    assert GOLDENS["mnist_with_summaries_tfjob.yaml"] == {"worker-0": None}
    job = _load(tmp_path, _manifest("mnist_with_summaries_tfjob.yaml"))
    (config,) = _rendered_tf_configs(job)
    assert json.loads(config)["task"] == {"type": "worker", "index": 0}
    assert len(json.loads(config)["cluster"]["worker"]) == 1


def _chief_job() -> dict[str, Any]:
    return _manifest("chief_worker_tfjob.yaml")


def _chief_container(document: dict[str, Any]) -> dict[str, Any]:
    return document["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]


def _two_chiefs(document: dict[str, Any]) -> None:
    document["spec"]["tfReplicaSpecs"]["Chief"]["replicas"] = 2


def _chief_and_master(document: dict[str, Any]) -> None:
    replicas = document["spec"]["tfReplicaSpecs"]
    replicas["Master"] = copy.deepcopy(replicas["Chief"])


def _chief_image(document: dict[str, Any]) -> None:
    _chief_container(document)["image"] = "kubeflow/other:1"


def _chief_restart(document: dict[str, Any]) -> None:
    document["spec"]["tfReplicaSpecs"]["Chief"]["restartPolicy"] = "OnFailure"


def _chief_port(document: dict[str, Any]) -> None:
    _chief_container(document)["ports"] = [{"name": "tfjob-port", "containerPort": 2345}]


def _chief_queue(document: dict[str, Any]) -> None:
    document["spec"]["runPolicy"]["schedulingPolicy"] = {"queue": "user-queue"}


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (_two_chiefs, "spec.tfReplicaSpecs.Chief.replicas", "one chief"),
        (_chief_and_master, "spec.tfReplicaSpecs.Master", "one Chief or one Master"),
        (_chief_image, "spec.tfReplicaSpecs.Chief", "differs from Worker in image"),
        (_chief_restart, "spec.tfReplicaSpecs.Chief", "differs from Worker in restartPolicy"),
        (_chief_port, "spec.tfReplicaSpecs.Chief", "differs from Worker in port"),
        (_chief_queue, "spec.runPolicy.schedulingPolicy.queue", "move the chief into Worker"),
    ],
)
def test_a_chief_tflaunch_cannot_run_as_written_is_exit_2_with_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, field: str, words: str
) -> None:
    document = _chief_job()
    change(document)
    path = tmp_path / "tfjob.yaml"
    path.write_text(yaml.safe_dump(document))
    assert run(["render", str(path)]) == 2
    printed = capsys.readouterr()
    assert printed.out == ""
    (line,) = printed.err.strip().splitlines()
    assert field in line and words in line


def test_a_chief_alone_is_a_group_of_one_chief(tmp_path: Path) -> None:
    document = _chief_job()
    del document["spec"]["tfReplicaSpecs"]["Worker"]
    job = _load(tmp_path, document)
    assert job.spec.workers == 1
    assert tfconfig.job_tf_config(job, 0)["task"] == {"type": "chief", "index": 0}


def test_convert_carries_the_chief_so_the_multiworkerjob_gives_the_same_tf_config(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tfjob.yaml"
    path.write_text(yaml.safe_dump(_chief_job()))
    result = CliRunner().invoke(cli, ["convert", str(path)])
    assert result.exit_code == 0, result.output
    converted = yaml.safe_load(result.stdout)
    assert converted["spec"]["tfConfig"] == {"chief": "chief", "environment": "cloud"}
    job = load.job_from_document(converted)
    assert _rendered_tf_configs(job) == _rendered_tf_configs(load.load_job(str(path)))
    assert any(
        line.startswith("# Chief: tflaunch's worker 0") for line in result.stdout.splitlines()
    )


@pytest.mark.parametrize("command", ["render", "validate", "tfconfig", "local", "convert"])
def test_an_evaluator_is_exit_2_with_one_line_naming_what_to_run_instead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    document = _chief_job()
    replicas = document["spec"]["tfReplicaSpecs"]
    replicas["Evaluator"] = copy.deepcopy(replicas["Worker"]) | {"replicas": 1}
    path = tmp_path / "tfjob.yaml"
    path.write_text(yaml.safe_dump(document))
    assert run([command, str(path)]) == 2
    printed = capsys.readouterr()
    assert printed.out == ""
    (line,) = printed.err.strip().splitlines()
    assert "spec.tfReplicaSpecs.Evaluator" in line and "SidecarEvaluator" in line


def test_replica_types_are_read_in_any_case_as_training_operator_reads_them(
    tmp_path: Path,
) -> None:
    document = _chief_job()
    replicas = document["spec"]["tfReplicaSpecs"]
    document["spec"]["tfReplicaSpecs"] = {"chief": replicas["Chief"], "WORKER": replicas["Worker"]}
    job = _load(tmp_path, document)
    assert (job.spec.workers, job.spec.tf_config.chief) == (3, "chief")


@pytest.mark.parametrize("workers", [2, 11, 101])
@pytest.mark.parametrize(
    "shape",
    [{}, {"environment": "cloud"}, {"chief": "chief", "environment": "cloud"}, {"chief": "master"}],
)
def test_the_tf_config_size_check_counts_the_largest_tf_config_exactly(
    workers: int, shape: dict[str, str]
) -> None:
    """The size checked against the kernel's limit on one environment string is the largest
    rendered one's (with its NUL), whatever the task names."""
    document = {
        "apiVersion": "tflaunch.dev/v1alpha1",
        "kind": "MultiWorkerJob",
        "metadata": {"name": "sized", "namespace": "team"},
        "spec": {
            "image": "img:1", "workers": workers, "command": ["python", "/t.py"],
            "layout": "per-worker", "tfConfig": shape,
        },
    }  # fmt: skip
    job = load.job_from_document(document)
    largest = max(
        len(f"TF_CONFIG={json.dumps(tfconfig.job_tf_config(job, i), separators=(',', ':'))}") + 1
        for i in range(workers)
    )
    assert limits.tf_config_env_bytes(job, workers) == largest


def test_convert_warns_that_tensorflow_2_refuses_a_master(tmp_path: Path) -> None:
    path = tmp_path / "tfjob.yaml"
    path.write_text(yaml.safe_dump(_manifest("master_worker_tfjob.yaml")))
    result = CliRunner().invoke(cli, ["convert", str(path)])
    assert result.exit_code == 0, result.output
    assert any(
        line.startswith("# Master:") and "rename the replica Chief" in line
        for line in result.stdout.splitlines()
    )
    assert yaml.safe_load(result.stdout)["spec"]["tfConfig"]["chief"] == "master"


def test_a_chief_is_for_the_users_own_program_not_the_built_in_trainer() -> None:
    document = {
        "apiVersion": "tflaunch.dev/v1alpha1",
        "kind": "MultiWorkerJob",
        "metadata": {"name": "builtin"},
        "spec": {"image": "img:1", "layout": "per-worker", "tfConfig": {"chief": "chief"}},
    }
    with pytest.raises(SpecError) as refused:
        load.job_from_document(document)
    assert refused.value.field == "spec.tfConfig.chief"
