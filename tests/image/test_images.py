"""The images `hack/images.sh build` makes here with no registry, checked from their archives
and run under runc the way the pods run them (no node: the image's ENTRYPOINT as PID 1, user
10001, read-only root filesystem, /tmp and /checkpoints the only writable places, no
capabilities).

The archive under test is the one for this tree's current inputs (`hack/images.sh path`), never
an older build. Without it (or, for the runs, without root, runc, skopeo and umoci) the tests
skip with one line; TFLAUNCH_REQUIRE_IMAGES=1 turns that into a failure, for a CI that builds
the images first (`make images-offline`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.core import contract
from tests.image._images import (
    IMAGES_SH,
    RUN_TIMEOUT,
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


@pytest.fixture(scope="module")
def trainer_archive() -> Path:
    return archive("trainer", "images-offline")


@pytest.fixture(scope="module")
def operator_archive() -> Path:
    return archive("operator", "images-offline")


@pytest.fixture(scope="module")
def runc() -> None:
    require_runc()


def test_the_trainer_archive_is_the_cpu_image_the_podsrun(trainer_archive: Path) -> None:
    tags, image = image_config(trainer_archive)
    config = image["config"]

    assert tagged(tags, f"tflaunch-trainer:{VERSION}-cpu"), tags
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["python", "-m", contract.WRAPPER_MODULE, "--"]
    assert config["Cmd"] == list(contract.BUILTIN_TRAINER)
    assert config["Labels"]["dev.tflaunch.variant"] == "cpu"
    assert config["Labels"]["dev.tflaunch.tensorflow-version"] == TF_PIN
    assert config["Labels"]["org.opencontainers.image.version"] == VERSION
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env[contract.ENV_LEGACY_KERAS] == "1"
    assert env[contract.ENV_DATA] == "/opt/tflaunch/mnist.npz"
    assert env["HOME"] == "/tmp"


def test_the_operator_archive_runs_the_operator_as_10001(operator_archive: Path) -> None:
    tags, image = image_config(operator_archive)
    config = image["config"]

    assert tagged(tags, f"tflaunch-operator:{VERSION}"), tags
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["tflaunch", "operator"]
    assert config["Labels"]["org.opencontainers.image.version"] == VERSION


@pytest.mark.tf
@pytest.mark.timeout(RUN_TIMEOUT)  # the first run unpacks the image (minutes)
@pytest.mark.usefixtures("runc")
def test_the_trainer_image_trains_on_its_baked_mnist_as_a_pod_would(
    trainer_archive: Path,
) -> None:
    proc = run(
        trainer_archive,
        *contract.BUILTIN_TRAINER,
        *("--epochs", "1", "--steps-per-epoch", "5"),
        *("--max-train-examples", "2560", "--max-test-examples", "512"),
        *("--checkpoint-dir", "/checkpoints"),
    )

    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "no multi-worker TF_CONFIG: running single-worker" in out
    assert f"TensorFlow {TF_PIN} sees" in out
    assert "/opt/tflaunch/mnist.npz" in out, "the trainer did not read the baked data"
    result = json.loads(out.split("TFLAUNCH_RESULT ", 1)[1].splitlines()[0])
    assert result["workers"] == 1
    assert result["optimizer_steps"] == 5
    assert result["test_examples"] == 512
    assert "the program finished" in out


PROBE = r"""
import errno, json, os
import tensorflow as tf
def writable(path):
    try:
        with open(os.path.join(path, "probe"), "w"):
            return True
    except OSError as e:
        return errno.errorcode[e.errno]
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines())
print("PROBE " + json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "ppid": os.getppid(),
    "pid1": open("/proc/1/cmdline").read().split("\0"),
    "cap_eff": status["CapEff"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
    "root": writable("/opt"), "tmp": writable("/tmp"), "checkpoints": writable("/checkpoints"),
    "keras": tf.keras.Model.__module__.split(".")[0],
}))
"""


@pytest.mark.tf
@pytest.mark.timeout(RUN_TIMEOUT)  # the first run unpacks the image (minutes)
@pytest.mark.usefixtures("runc")
def test_the_trainer_container_is_restricted_like_a_pod_and_uses_tf_keras(
    trainer_archive: Path,
) -> None:
    proc = run(trainer_archive, "python", "-c", PROBE)

    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    probe = json.loads(out.split("PROBE ", 1)[1].splitlines()[0])
    assert (probe["uid"], probe["gid"]) == (int(UID), int(UID))
    assert probe["ppid"] == 1, "the program is not the child of the container's PID 1"
    assert probe["pid1"][:3] == ["python", "-m", contract.WRAPPER_MODULE]
    assert int(probe["cap_eff"], 16) == 0
    assert probe["no_new_privs"] == "1"
    assert probe["root"] == "EROFS"
    assert probe["tmp"] is True
    assert probe["checkpoints"] is True
    assert probe["keras"] == "tf_keras", "TF_USE_LEGACY_KERAS did not select tf-keras"


@pytest.fixture
def container_name() -> Iterator[str]:
    name = f"tflaunch-test-{uuid.uuid4().hex[:8]}"
    yield name
    images_sh("kill", name, "KILL")


@pytest.mark.tf
@pytest.mark.timeout(RUN_TIMEOUT)  # the first run unpacks the image (minutes)
@pytest.mark.usefixtures("runc")
def test_sigterm_to_the_containers_pid_1_saves_and_exits_79(
    trainer_archive: Path, container_name: str
) -> None:
    """What the kubelet does to a preempted pod: SIGTERM to PID 1 (the wrapper), which passes
    it to the trainer; every worker saves at one step and the container exits 79."""
    proc = subprocess.Popen(
        ["bash", str(IMAGES_SH), "run", str(trainer_archive), "--name", container_name, "--",
         *contract.BUILTIN_TRAINER, "--epochs", "3", "--checkpoint-dir", "/checkpoints"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        sys.stderr.write(line)
        if line.startswith("TFLAUNCH_PROGRESS "):
            break
    else:
        pytest.fail("the trainer ended before its first progress line:\n" + "".join(lines))
    signalled = images_sh("kill", container_name, "TERM")
    assert signalled.returncode == 0, signalled.stderr
    rest, _ = proc.communicate(timeout=RUN_TIMEOUT)
    out = "".join(lines) + rest

    assert proc.returncode == contract.EXIT_PREEMPTED, out
    assert "SIGTERM received: passing it to the program" in out
    assert "every worker saved at step" in out
