"""`--script` on the real API server: the ConfigMap is accepted, owned by the Job, and the
pods the Job controller creates mount it read-only and run it through the worker wrapper; a
resubmit writes nothing and an edited script is refused as a changed spec. (kwok runs no
container: what is checked is what the server stored.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ControlPlane, eventually, pod_hooks, write_spec

pytestmark = pytest.mark.e2e

SELECTOR = "tflaunch.dev/job-name"
MOUNT = "/opt/tflaunch/script"


def _config_maps(cp: ControlPlane, namespace: str, job: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = cp.get("configmaps", "-n", namespace, "-l", f"{SELECTOR}={job}")[
        "items"
    ]
    return found


def _script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(text)
    return path


def test_submit_script_stores_it_in_a_config_map_the_pods_mount(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    script = _script(tmp_path, "import os\nprint('mine', os.environ['TFLAUNCH_WORKER_INDEX'])\n")
    spec = write_spec(tmp_path / "job.yaml", "own", namespace, hooks=pod_hooks(run_for="1h"))
    done = cp.tflaunch("submit", str(spec), "--script", str(script), "--set", "spec.args=[-v]")
    assert done.code == 0, done
    (config_map,) = _config_maps(cp, namespace, "own")
    assert config_map["data"] == {"train.py": script.read_text()}
    assert config_map["immutable"] is True
    (job,) = cp.get("jobs", "-n", namespace, "-l", f"{SELECTOR}=own")["items"]
    owners = config_map["metadata"]["ownerReferences"]
    assert [(o["kind"], o["uid"]) for o in owners] == [("Job", job["metadata"]["uid"])]

    pods = eventually(
        lambda: cp.get("pods", "-n", namespace, "-l", f"{SELECTOR}=own")["items"],
        what="the Job controller's pods", timeout=60,
    )  # fmt: skip
    for pod in pods:
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "script")
        assert volume["configMap"]["name"] == config_map["metadata"]["name"]
        container = pod["spec"]["containers"][0]
        mount = next(m for m in container["volumeMounts"] if m["name"] == "script")
        assert (mount["mountPath"], mount.get("readOnly")) == (MOUNT, True)
        assert container["command"] == ["python", "-m", "trainer.run"]
        args = container["args"]
        assert args[args.index("--") + 1 :] == ["python", f"{MOUNT}/train.py", "-v"]

    again = cp.tflaunch("submit", str(spec), "--script", str(script), "--set", "spec.args=[-v]")
    assert again.code == 0, again
    assert "unchanged" in again.out
    script.write_text("print('edited')\n")
    edited = cp.tflaunch("submit", str(spec), "--script", str(script), "--set", "spec.args=[-v]")
    assert edited.code != 0 and "--replace" in edited.err, edited
    assert len(_config_maps(cp, namespace, "own")) == 1  # nothing half-applied


def test_a_script_over_one_mebibyte_never_reaches_the_server(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    script = _script(tmp_path, "#" * (1024 * 1024 + 1))
    spec = write_spec(tmp_path / "job.yaml", "big", namespace)
    done = cp.tflaunch("submit", str(spec), "--script", str(script))
    assert done.code == 2, done
    assert done.err.count("\n") <= 1 and "spec.script" in done.err
    assert cp.get("jobs,configmaps", "-n", namespace, "-l", f"{SELECTOR}=big")["items"] == []


def test_submit_script_dir_keeps_the_tutorial_layout_in_the_config_map(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """TensorFlow's tutorials are main.py + mnist_setup.py; a nested package's keys cannot
    hold '/': the server accepts the mapped keys and the pods mount each at its path."""
    cp = control_plane
    root = tmp_path / "prog"
    (root / "pkg").mkdir(parents=True)
    files = {
        "main.py": "import mnist_setup\nfrom pkg import util\n",
        "mnist_setup.py": "X = 1\n",
        "pkg/__init__.py": "",
        "pkg/util.py": "Y = 2\n",
    }
    for rel, text in files.items():
        (root / rel).write_text(text)
    spec = write_spec(tmp_path / "job.yaml", "tut", namespace, hooks=pod_hooks(run_for="1h"))
    done = cp.tflaunch("submit", str(spec), "--script", str(root / "main.py"))
    assert done.code == 0, done
    (config_map,) = _config_maps(cp, namespace, "tut")
    pods = eventually(
        lambda: cp.get("pods", "-n", namespace, "-l", f"{SELECTOR}=tut")["items"],
        what="the Job controller's pods", timeout=60,
    )  # fmt: skip
    for pod in pods:
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "script")
        mounted = {i["path"]: config_map["data"][i["key"]] for i in volume["configMap"]["items"]}
        assert mounted == files
        args = pod["spec"]["containers"][0]["args"]
        assert args[args.index("--") + 1 :] == ["python", f"{MOUNT}/main.py"]
