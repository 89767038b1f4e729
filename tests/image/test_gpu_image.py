"""The GPU trainer image, the one `make image` builds with Docker (`make deploy`'s default),
built here offline (`make image-gpu-offline`: `hack/images.sh build trainer-gpu`) and run under
runc as the pods run it, on this machine, which has no GPU and no NVIDIA driver:

- TensorFlow in it is a CUDA build, with the CUDA and cuDNN wheels of the GPU lock
  (docker/base/requirements-tensorflow-gpu.txt), which is also what `make image` installs;
- a pod asking for a GPU it cannot see is refused by the worker wrapper's GPU preflight with
  exit 78 and one line saying what to check, not a traceback;
- Keras is tf-keras (TF_USE_LEGACY_KERAS=1), as in the CPU image.

That TensorFlow in it finds a GPU and trains on it is not shown: there is none here.

The archive is about 7 GB, so CI does not build it and these tests skip, naming the make target;
TFLAUNCH_REQUIRE_GPU_IMAGE=1 (`make test-image-gpu`) turns that into a failure. The bundle the
runs unpack (about 7 GB too) is removed when the module ends.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.core import contract
from tests.image._images import (
    ROOT,
    TF_PIN,
    UID,
    VERSION,
    archive,
    image_config,
    images_sh,
    require_runc,
    run,
    tagged,
)

pytestmark = pytest.mark.image

REQUIRE = "TFLAUNCH_REQUIRE_GPU_IMAGE"
GPU_REF = f"tflaunch-trainer:{VERSION}"
GPU_LOCK = ROOT / "docker" / "base" / "requirements-tensorflow-gpu.txt"


@pytest.fixture(scope="module")
def gpu_archive() -> Path:
    return archive("trainer-gpu", "image-gpu-offline", REQUIRE)


@pytest.fixture(scope="module")
def gpu_bundle(gpu_archive: Path) -> Iterator[Path]:
    """The archive, runnable; its unpacked bundle is removed after the module's runs."""
    require_runc(REQUIRE)
    yield gpu_archive
    images_sh("unbundle", str(gpu_archive))


PROBE = r"""
import importlib.metadata as md, json, re
import tensorflow as tf
info = tf.sysconfig.get_build_info()
print("PROBE " + json.dumps({
    "tensorflow": tf.__version__,
    "built_with_cuda": tf.test.is_built_with_cuda(),
    "cuda_version": info.get("cuda_version"),
    "cudnn_version": info.get("cudnn_version"),
    "gpus": len(tf.config.list_physical_devices("GPU")),
    "keras": tf.keras.Model.__module__.split(".")[0],
    "tf_keras": md.version("tf-keras"),
    "nvidia": {name: d.version for d in md.distributions()
               for name in [re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower()]
               if name.startswith("nvidia-")},
}))
"""


@pytest.fixture(scope="module")
def probe(gpu_bundle: Path) -> dict[str, Any]:
    """What TensorFlow in the image says of itself, from one run through the wrapper (the
    image's ENTRYPOINT, no GPU asked for)."""
    proc = run(gpu_bundle, "python", "-c", PROBE)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    found: dict[str, Any] = json.loads(out.split("PROBE ", 1)[1].splitlines()[0])
    sys.stderr.write(f"gpu image probe: {json.dumps(found)}\n")
    return found


def locked_cuda_wheels() -> dict[str, str]:
    pins = re.findall(r"^(nvidia-[a-z0-9-]+)==(\S+)", GPU_LOCK.read_text(), re.M)
    assert pins, f"no nvidia-* pins in {GPU_LOCK}"
    return dict(pins)


def test_the_gpu_archive_is_the_image_make_image_tags(gpu_archive: Path) -> None:
    tags, image = image_config(gpu_archive)
    config = image["config"]

    assert tagged(tags, GPU_REF), tags
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["python", "-m", contract.WRAPPER_MODULE, "--"]
    assert config["Cmd"] == list(contract.BUILTIN_TRAINER)
    assert config["Labels"]["dev.tflaunch.variant"] == "gpu"
    assert config["Labels"]["dev.tflaunch.tensorflow-version"] == TF_PIN
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env[contract.ENV_LEGACY_KERAS] == "1"
    assert env[contract.ENV_DATA] == "/opt/tflaunch/mnist.npz"


@pytest.mark.tf
@pytest.mark.timeout(1800)  # the first run unpacks about 7 GB (minutes)
def test_tensorflow_in_it_is_the_pinned_cuda_build(probe: dict[str, Any]) -> None:
    assert probe["tensorflow"] == TF_PIN
    assert probe["built_with_cuda"] is True
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", probe["cuda_version"] or ""), probe
    assert re.fullmatch(r"\d+(\.\d+)*", probe["cudnn_version"] or ""), probe
    assert probe["gpus"] == 0, "this machine has no GPU: the probe ran somewhere else"


@pytest.mark.tf
@pytest.mark.timeout(1800)
def test_its_cuda_wheels_are_the_gpu_locks(probe: dict[str, Any]) -> None:
    assert probe["nvidia"] == locked_cuda_wheels()


@pytest.mark.tf
@pytest.mark.timeout(1800)
def test_keras_in_it_is_tf_keras_as_in_the_cpu_image(probe: dict[str, Any]) -> None:
    assert probe["keras"] == "tf_keras", "TF_USE_LEGACY_KERAS did not select tf-keras"
    assert probe["tf_keras"] == TF_PIN


def gpu_pod_container() -> dict[str, Any]:
    """The trainer container of `tflaunch render` for one worker with one GPU, this image."""
    rendered = subprocess.run(
        [sys.executable, "-m", "launcher", "render", "examples/mnist.yaml",
         "--workers", "1", "--gpus", "1", "--image", GPU_REF],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    (job,) = [doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] == "Job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    return dict(container)


def kubelet_env(container: dict[str, Any], index: int) -> list[str]:
    """The container's environment as the kubelet gives worker `index`: its fieldRefs read
    from the pod (the completion index; a Job's uid for the rest) and `$(NAME)` expanded."""
    values: dict[str, str] = {}
    for item in container["env"]:
        if "value" in item:
            value = item["value"]
        elif "completion-index" in item["valueFrom"]["fieldRef"]["fieldPath"]:
            value = str(index)
        else:
            value = "00000000-0000-0000-0000-000000000001"
        values[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: values.get(m[1], m[0]), value)
    return [f"{name}={value}" for name, value in values.items()]


@pytest.mark.tf
@pytest.mark.timeout(1800)
def test_a_pod_asking_for_a_gpu_it_cannot_see_exits_78_with_one_line(gpu_bundle: Path) -> None:
    container = gpu_pod_container()

    proc = run(
        gpu_bundle,
        *container["command"],
        *container["args"],
        command=True,
        env=tuple(kubelet_env(container, 0)),
    )

    out = proc.stdout + proc.stderr
    assert proc.returncode == contract.EXIT_CONFIG_ERROR, out
    (line,) = [line for line in out.splitlines() if "expected 1 GPU(s)" in line]
    assert "but TensorFlow sees 0" in line
    assert "nvidia.com/gpu: 1" in line
    assert "tf.test.is_built_with_cuda() is True" in line
    assert "the GPU check failed (see the line above); not starting" in out
    assert "Traceback" not in out
    assert "starting python -m trainer" not in out, "the program started without its GPU"
    sys.stderr.write(f"gpu preflight (exit {proc.returncode}):\n{out}")
