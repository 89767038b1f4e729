"""`tflaunch local TFJOB`: a Kubeflow TFJob with a Chief and a Worker runs on this machine
with the TF_CONFIG training-operator gives its pods (loopback addresses for host names), and
TensorFlow's MultiWorkerMirroredStrategy takes the chief as the group's chief."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

DATA = Path(__file__).resolve().parents[1] / "data" / "tfjob"
TIMEOUT = 300
LINE = re.compile(r"^\[worker (\d)\] (.*)$", re.MULTILINE)


def _tfjob(program: Path) -> dict[str, object]:
    """Kubeflow's Chief example (chief_worker_tfjob.yaml) with one Worker, no GPU or volume,
    and this machine's program."""
    document = yaml.safe_load((DATA / "chief_worker_tfjob.yaml").read_text())
    for replica in document["spec"]["tfReplicaSpecs"].values():
        replica["replicas"] = 1
        pod = replica["template"]["spec"]
        pod.pop("volumes")
        (container,) = pod["containers"]
        container.pop("volumeMounts")
        container.pop("resources")
        container["command"] = ["python", str(program)]
    return document


def _lines(output: str) -> dict[int, list[str]]:
    by_worker: dict[int, list[str]] = {}
    for worker, text in LINE.findall(output):
        by_worker.setdefault(int(worker), []).append(text)
    return by_worker


@pytest.mark.tf
def test_a_chief_and_a_worker_train_as_one_group_with_training_operators_tf_config(
    tmp_path: Path,
) -> None:
    manifest = tmp_path / "tfjob.yaml"
    manifest.write_text(yaml.safe_dump(_tfjob(DATA / "chief_branch.py")))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "TFLAUNCH_"))}
    run = subprocess.run(
        [sys.executable, "-m", "launcher", "local", str(manifest),
         "--workdir", str(tmp_path / "w")],
        capture_output=True, text=True, timeout=TIMEOUT, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = _lines(run.stdout)
    configs = {
        w: json.loads(next(t for t in ls if t.startswith("TF_CONFIG ")).removeprefix("TF_CONFIG "))
        for w, ls in lines.items()
    }
    assert [configs[w]["task"] for w in (0, 1)] == [
        {"type": "chief", "index": 0},
        {"type": "worker", "index": 0},
    ]
    assert {w: sorted(c["cluster"]) for w, c in configs.items()} == {
        0: ["chief", "worker"],
        1: ["chief", "worker"],
    }
    assert configs[0]["cluster"] == configs[1]["cluster"]
    assert {c["environment"] for c in configs.values()} == {"cloud"}
    assert "tensorflow: task chief 0, 2 replicas, should_checkpoint True" in lines[0]
    assert "tensorflow: task worker 0, 2 replicas, should_checkpoint False" in lines[1]
    digests = {t.rsplit(" ", 1)[1] for ls in lines.values() for t in ls if "weights sha256" in t}
    assert len(digests) == 1, "the chief and the worker must end with the same weights"
    (saved,) = [t.removeprefix("chief saved ") for t in lines[0] if t.startswith("chief saved ")]
    assert Path(saved).is_file()
