"""A Kubeflow TFJob with a Chief runs in containers: `tflaunch submit tfjob.yaml --wait` on the
real node, Kubeflow's Chief example (tests/data/tfjob/chief_worker_tfjob.yaml) pointed at the
trainer image built here, with a program that branches on TF_CONFIG's task.type (carried to
the pods with --script). Each pod's TF_CONFIG is what `tflaunch tfconfig` prints for the
manifest (training-operator's, bar the host names: tests/core/test_tfjob_tf_config.py), the
chief and the worker resolve each other through the headless Service and train as one
MultiWorkerMirroredStrategy group, and TensorFlow takes the chief as its chief."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import ROOT, ControlPlane, eventually
from tests.node.conftest import REAL_NODE
from tests.node.jobs import succeeded_on_the_node, worker_lines

pytestmark = [pytest.mark.node, pytest.mark.slow]

DATA = ROOT / "tests" / "data" / "tfjob"
PROGRAM = DATA / "chief_branch.py"


@pytest.fixture
def namespace(real_node: ControlPlane) -> Iterator[str]:
    name = f"tfjob-{uuid.uuid4().hex[:5]}"
    real_node.kubectl("create", "namespace", name)
    yield name
    real_node.kubectl("delete", "namespace", name, "--wait=false", check=False)


def real_node_tfjob(path: Path, namespace: str, image: str) -> Path:
    """The Chief example as a TFJob user points it at the real node: one Chief and one Worker,
    a local image, the node's label and taint, small requests, no GPU or volume."""
    document: dict[str, Any] = yaml.safe_load((DATA / "chief_worker_tfjob.yaml").read_text())
    document["metadata"]["namespace"] = namespace
    for replica in document["spec"]["tfReplicaSpecs"].values():
        replica["replicas"] = 1
        pod = replica["template"]["spec"]
        del pod["volumes"]
        pod["nodeSelector"] = {REAL_NODE: "true"}
        pod["tolerations"] = [{"key": REAL_NODE, "operator": "Exists", "effect": "NoSchedule"}]
        (container,) = pod["containers"]
        del container["volumeMounts"]
        container.update(
            image=image,
            imagePullPolicy="Never",
            command=["python", f"/opt/tflaunch/script/{PROGRAM.name}"],
            resources={
                "requests": {"cpu": "250m", "memory": "1Gi"},
                "limits": {"cpu": "2", "memory": "4Gi"},
            },
        )
    path.write_text(yaml.safe_dump(document))
    return path


def _every_worker_ended(real_node: ControlPlane, namespace: str) -> bool:
    status = real_node.tflaunch("status", "multi-worker", "-n", namespace, "-o", "json")
    workers = json.loads(status.out)["status"]["workers"] if status.code == 0 else []
    return bool(workers) and all(w["exitCode"] is not None for w in workers)


@pytest.mark.timeout(1200)
def test_a_tfjob_with_a_chief_trains_in_containers_with_training_operators_tf_config(
    real_node: ControlPlane, trainer_image: str, namespace: str, tmp_path: Path
) -> None:
    manifest = real_node_tfjob(tmp_path / "tfjob.yaml", namespace, trainer_image)

    run = real_node.tflaunch(
        "submit", str(manifest), "--script", str(PROGRAM), "--wait", "--timeout", "15m",
        timeout=1000,
    )  # fmt: skip

    assert run.code == 0, run
    assert "job multi-worker succeeded" in run.out + run.err, run
    # successPolicy (the TFJob's default): the chief's exit 0 decided; the worker, which ran
    # the same collectives, ends on its own a moment later.
    eventually(lambda: _every_worker_ended(real_node, namespace), what="the worker's end")
    succeeded_on_the_node(real_node, namespace, "multi-worker")
    expected = real_node.tflaunch("tfconfig", str(manifest), "--script", str(PROGRAM))
    assert expected.code == 0, expected
    logs = real_node.tflaunch("logs", "multi-worker", "-n", namespace)
    assert logs.code == 0, logs
    lines = {w: worker_lines(logs, w) for w in (0, 1)}
    got = [
        json.loads(next(t for t in lines[w] if t.startswith("TF_CONFIG ")).split(" ", 1)[1])
        for w in (0, 1)
    ]
    assert got == [json.loads(line) for line in expected.out.splitlines()]
    assert [c["task"] for c in got] == [
        {"type": "chief", "index": 0},
        {"type": "worker", "index": 0},
    ]
    assert "tensorflow: task chief 0, 2 replicas, should_checkpoint True" in lines[0], logs.out
    assert "tensorflow: task worker 0, 2 replicas, should_checkpoint False" in lines[1], logs.out
    digests = {t.rsplit(" ", 1)[1] for w in (0, 1) for t in lines[w] if "weights sha256" in t}
    assert len(digests) == 1, logs.out  # the all-reduce kept the chief and the worker equal
