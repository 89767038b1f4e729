"""`tflaunch local --gpus N`: each worker its own GPUs, as the device plugin does in a pod;
too few GPUs on this machine is refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cli import main as cli
from launcher.core.errors import SpecError
from launcher.core.load import load_job
from launcher.local import gpus
from launcher.local.paths import LocalPaths
from launcher.local.runner import worker_commands


def test_the_driver_lists_the_gpus(tmp_path: Path) -> None:
    for address in ("0000:3b:00.0", "0000:5e:00.0", "0000:86:00.0"):
        (tmp_path / address).mkdir()
    assert gpus.visible_gpus({}, str(tmp_path)) == (["0", "1", "2"], f"3 in {tmp_path}")


def test_no_driver_means_no_gpus(tmp_path: Path) -> None:
    found, source = gpus.visible_gpus({}, str(tmp_path / "absent"))
    assert found == [] and "no NVIDIA driver" in source


@pytest.mark.parametrize(
    ("value", "expected"),
    [("2,3", ["2", "3"]), ("GPU-8f1c, GPU-a2b4", ["GPU-8f1c", "GPU-a2b4"]), ("", []),
     ("-1", []), ("0,-1,1", ["0"])],
)  # fmt: skip
def test_the_users_cuda_visible_devices_says_which_gpus_tflaunch_may_use(
    value: str, expected: list[str], tmp_path: Path
) -> None:
    (tmp_path / "0000:3b:00.0").mkdir()  # the driver's list is not read when the user chose
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": value}, str(tmp_path))[0] == expected


def test_each_worker_gets_its_own_slice() -> None:
    assert gpus.assign(2, 2, ["0", "1", "2", "3", "4"], "") == ["0,1", "2,3"]
    assert gpus.assign(3, 1, ["7", "5", "6"], "") == ["7", "5", "6"]
    assert gpus.assign(2, 0, [], "") is None  # CPU workers: nothing to split


def test_too_few_gpus_names_the_field_the_count_and_the_fix() -> None:
    with pytest.raises(SpecError) as caught:
        gpus.assign(2, 2, ["0", "1", "2"], "3 in /proc/driver/nvidia/gpus")
    assert caught.value.field == "spec.gpusPerWorker"
    message = str(caught.value)
    assert "need 4 GPU(s), and this machine has 3 (3 in /proc/driver/nvidia/gpus)" in message
    assert "--gpus 0" in message


def test_the_slices_reach_each_workers_environment(tmp_path: Path) -> None:
    job = load_job(None, [("spec.gpusPerWorker", 1)], local=True)  # as `tflaunch local` loads
    commands = worker_commands(job, LocalPaths(tmp_path), [1, 2], 0, None, gpu_slices=["3", "5"])
    for index, (_, env) in enumerate(commands):
        assert env["CUDA_VISIBLE_DEVICES"] == ["3", "5"][index]
        assert json.loads(env["TF_CONFIG"])["task"]["index"] == index


def test_local_with_more_gpus_than_the_machine_has_is_exit_2_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # one GPU, whatever this machine has
    workdir = tmp_path / "run"
    code = cli.run(["local", "--workers", "2", "--gpus", "1", "--workdir", str(workdir)])
    out, err = capsys.readouterr()
    assert code == 2 and not out, out
    (line,) = err.strip().splitlines()
    assert line.startswith("tflaunch: error: spec.gpusPerWorker: 2 local worker(s) x 1 GPU(s)")
    assert "this machine has 1 (CUDA_VISIBLE_DEVICES='0')" in line
    assert not workdir.exists()
