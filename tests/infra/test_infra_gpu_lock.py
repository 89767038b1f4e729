"""The GPU trainer image's pins, checked without building it (issue 34): both ways of building
it, `make image` with Docker on tensorflow/tensorflow:*-gpu and `make image-gpu-offline` here,
take the CUDA and cuDNN wheels from one hash-locked file, docker/base/
requirements-tensorflow-gpu.txt, whose other packages are the CPU image's. TensorFlow's
`and-cuda` extra asks only for ranges (nvidia-cudnn-cu12 >=9.3,<10): without the lock, each
Docker build took the newest CUDA wheels of its day."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.infra._infra import REPO

BASE = REPO / "docker" / "base"
GPU_LOCK = "docker/base/requirements-tensorflow-gpu.txt"
ENTRY = re.compile(r"^([a-z0-9-]+)==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", re.M)


def lock(name: str) -> dict[str, str]:
    """A lock's name -> version; every entry must carry its sha256 (pip's --require-hashes)."""
    text = (BASE / f"requirements-{name}.txt").read_text()
    entries = [line for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    pins = {name: version for name, version, _ in ENTRY.findall(text)}
    assert len(pins) == len(entries), f"requirements-{name}.txt: an entry without its sha256"
    return pins


def pyproject_pin(package: str) -> str:
    match = re.search(rf'"{package}==([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert match, f"pyproject.toml does not pin {package}"
    return match[1]


def project_version() -> str:
    match = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert match, "pyproject.toml has no version"
    return match[1]


def test_the_gpu_lock_is_the_cpu_lock_with_tensorflows_cuda_build() -> None:
    cpu, gpu = lock("tensorflow-cpu"), lock("tensorflow-gpu")
    cuda = {name: version for name, version in gpu.items() if name.startswith("nvidia-")}

    assert gpu["tensorflow"] == cpu["tensorflow-cpu"] == pyproject_pin("tensorflow")
    assert cuda["nvidia-cudnn-cu12"].startswith("9."), "TensorFlow >= 2.18 loads cuDNN 9"
    assert {"nvidia-cublas-cu12", "nvidia-cuda-runtime-cu12", "nvidia-nccl-cu12"} <= set(cuda)
    rest = {name: v for name, v in gpu.items() if name not in cuda and name != "tensorflow"}
    assert rest == {name: v for name, v in cpu.items() if name != "tensorflow-cpu"}, (
        "the GPU lock drifted from the CPU lock: hack/images.sh lock gpu"
    )


def test_the_offline_gpu_base_installs_the_gpu_lock_hash_checked() -> None:
    dockerfile = (BASE / "Dockerfile").read_text()
    stage = dockerfile.split("FROM python AS tensorflow-gpu", 1)[1]

    assert "source=requirements-tensorflow-gpu.txt" in stage
    assert "--require-hashes" in stage
    assert "tf.test.is_built_with_cuda()" in stage


def test_make_image_installs_the_cuda_wheels_of_the_gpu_lock() -> None:
    dockerfile = re.sub(r"\\\n\s*", " ", (REPO / "docker" / "Dockerfile").read_text())
    (install,) = [line for line in dockerfile.splitlines() if "install-trainer.sh /build" in line]
    script = (REPO / "docker" / "install-trainer.sh").read_text()

    assert f"source={GPU_LOCK},target=/build/requirements-tensorflow-gpu.txt" in install
    assert "TF_GPU_LOCK=/build/requirements-tensorflow-gpu.txt" in install
    assert '--require-hashes -r "$workdir/cuda.txt"' in script


def test_install_trainer_refuses_the_gpu_variant_without_its_lock(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TF_GPU_LOCK"}
    result = subprocess.run(
        ["bash", str(REPO / "docker/install-trainer.sh"), str(tmp_path)],
        env={**env, "PYTHON": sys.executable, "VARIANT": "gpu", "TF_VERSION": "2.21.0"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode != 0
    assert f"set TF_GPU_LOCK to {GPU_LOCK}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_the_offline_gpu_image_is_tagged_as_make_image_tags_it() -> None:
    result = subprocess.run(
        ["bash", str(REPO / "hack/images.sh"), "ref", "trainer-gpu"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip

    assert result.stdout.strip() == f"tflaunch-trainer:{project_version()}"
