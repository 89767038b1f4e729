"""The Makefile's image and cluster targets, read through `make -n`.

`make -n` prints a target's commands without running them, so these tests see exactly what
`make deploy` or `make kind-test` would do on a machine with Docker and a cluster.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable

import pytest
import yaml

from tests.infra._infra import ANSI_ESCAPE, REPO

MakeDryRun = Callable[..., str]
Make = Callable[..., subprocess.CompletedProcess[str]]

_version = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M)
assert _version, "pyproject.toml has no version"
VERSION = _version[1]


def commands(output: str) -> list[list[str]]:
    """`make -n` output as argument lists, one per command (continuation lines joined)."""
    joined = re.sub(r"\\\n\s*", " ", output)
    return [shlex.split(line) for line in joined.splitlines() if line.strip()]


ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def find_command_with_env(output: str, *prefix: str) -> tuple[dict[str, str], list[str]]:
    """The first command whose leading words are PREFIX (its program may be a path), and the
    environment assignments in front of it."""
    for words in commands(output):
        n_assignments = next(
            (i for i, word in enumerate(words) if not ASSIGNMENT.match(word)), len(words)
        )
        env = dict(word.split("=", 1) for word in words[:n_assignments])
        argv = words[n_assignments:]
        if argv and [argv[0].rsplit("/", 1)[-1], *argv[1:]][: len(prefix)] == list(prefix):
            return env, argv
    raise AssertionError(f"no `{' '.join(prefix)}` command in:\n{output}")


def find_command(output: str, *prefix: str) -> list[str]:
    return find_command_with_env(output, *prefix)[1]


def option(argv: list[str], name: str) -> str:
    assert name in argv, f"{name} missing from {argv}"
    return argv[argv.index(name) + 1]


def docker_build(output: str) -> list[str]:
    env, argv = find_command_with_env(output, "docker", "build")
    assert env.get("DOCKER_BUILDKIT") == "1", "the Dockerfiles need BuildKit"
    return argv


def test_deploy_submits_the_spec_with_the_given_values_and_waits(make_dry_run: MakeDryRun) -> None:
    output = make_dry_run("deploy", "WORKERS=4", "GPUS=1", "IMAGE=reg/x:1", "NAMESPACE=ml")

    assert (
        ".venv/bin/tflaunch submit examples/mnist.yaml --name mnist -n ml --image reg/x:1"
        " --workers 4 --gpus 1 --wait"
    ) in output


def test_deploy_passes_name_and_timeout_through(make_dry_run: MakeDryRun) -> None:
    argv = find_command(
        make_dry_run("deploy", "NAME=big", "TIMEOUT=600", "IMAGE=reg/x:1"), "tflaunch", "submit"
    )

    assert option(argv, "--name") == "big"
    assert option(argv, "--timeout") == "600"


def test_deploy_defaults_to_the_gpu_image_with_one_gpu(make_dry_run: MakeDryRun) -> None:
    argv = find_command(make_dry_run("deploy"), "tflaunch", "submit")

    assert option(argv, "--image") == f"tflaunch-trainer:{VERSION}"
    assert option(argv, "--gpus") == "1"
    assert option(argv, "--workers") == "2"
    assert option(argv, "-n") == "default"


def test_deploy_of_the_cpu_variant_asks_for_no_gpu(make_dry_run: MakeDryRun) -> None:
    argv = find_command(make_dry_run("deploy", "VARIANT=cpu"), "tflaunch", "submit")

    assert option(argv, "--image") == f"tflaunch-trainer:{VERSION}-cpu"
    assert option(argv, "--gpus") == "0"


def test_deploy_after_push_uses_the_pushed_image(make_dry_run: MakeDryRun) -> None:
    argv = find_command(make_dry_run("deploy", "REGISTRY=ghcr.io/acme"), "tflaunch", "submit")

    assert option(argv, "--image") == f"ghcr.io/acme/tflaunch-trainer:{VERSION}"


@pytest.mark.parametrize(
    ("target", "command"),
    [
        ("undeploy", "tflaunch delete job7 -n ml"),
        ("status", "tflaunch status job7 -n ml"),
        ("logs", "tflaunch logs job7 -n ml -f"),
    ],
)
def test_job_targets_call_tflaunch_on_name_and_namespace(
    make_dry_run: MakeDryRun, target: str, command: str
) -> None:
    output = make_dry_run(target, "NAME=job7", "NAMESPACE=ml")

    assert f".venv/bin/{command}" in output


def test_logs_of_one_worker(make_dry_run: MakeDryRun) -> None:
    argv = find_command(make_dry_run("logs", "WORKER=0"), "tflaunch", "logs")

    assert option(argv, "--worker") == "0"


def test_image_builds_the_gpu_variant_by_default(make_dry_run: MakeDryRun) -> None:
    argv = docker_build(make_dry_run("image"))

    assert option(argv, "--file") == "docker/Dockerfile"
    assert "VARIANT=gpu" in argv
    assert f"VERSION={VERSION}" in argv
    assert option(argv, "--tag") == f"tflaunch-trainer:{VERSION}"
    assert argv[-1] == ".", "the build context is the repository root"


def test_image_cpu_builds_the_cpu_variant(make_dry_run: MakeDryRun) -> None:
    argv = docker_build(make_dry_run("image-cpu"))

    assert "VARIANT=cpu" in argv
    assert option(argv, "--tag") == f"tflaunch-trainer:{VERSION}-cpu"


@pytest.mark.parametrize(
    ("variables", "tag"),
    [
        (["IMAGE=reg.example/team/trainer", "TAG=7"], "reg.example/team/trainer:7"),
        (["IMAGE=localhost:5000/trainer", "TAG=7"], "localhost:5000/trainer:7"),
        (["IMAGE=reg.example/trainer:given", "TAG=7"], "reg.example/trainer:given"),
    ],
)
def test_image_takes_image_and_tag(
    make_dry_run: MakeDryRun, variables: list[str], tag: str
) -> None:
    assert option(docker_build(make_dry_run("image", *variables)), "--tag") == tag


def test_image_passes_offline_and_mirror_build_arguments(make_dry_run: MakeDryRun) -> None:
    argv = docker_build(
        make_dry_run("image", "BASE_IMAGE=mirror/tf:2.21.0-gpu", "MNIST_URL=file:///srv/mnist.npz")
    )

    assert "BASE_IMAGE=mirror/tf:2.21.0-gpu" in argv
    assert "MNIST_URL=file:///srv/mnist.npz" in argv


def test_the_cpu_image_is_the_one_the_example_spec_names(make_dry_run: MakeDryRun) -> None:
    example = yaml.safe_load((REPO / "examples" / "mnist.yaml").read_text())

    assert option(docker_build(make_dry_run("image-cpu")), "--tag") == example["spec"]["image"]


def test_operator_image_builds_the_operator_dockerfile(make_dry_run: MakeDryRun) -> None:
    argv = docker_build(make_dry_run("operator-image"))

    assert option(argv, "--file") == "docker/Dockerfile.operator"
    assert option(argv, "--tag") == f"tflaunch-operator:{VERSION}"


@pytest.mark.parametrize(("overrides", "which"), [((), "all"), (("IMAGES=trainer",), "trainer")])
def test_images_offline_builds_with_the_offline_script(
    make_dry_run: MakeDryRun, overrides: tuple[str, ...], which: str
) -> None:
    assert find_command(make_dry_run("images-offline", *overrides), "images.sh") == [
        "hack/images.sh", "build", which,
    ]  # fmt: skip


def test_image_gpu_offline_builds_the_gpu_trainer_with_the_offline_script(
    make_dry_run: MakeDryRun,
) -> None:
    assert find_command(make_dry_run("image-gpu-offline"), "images.sh") == [
        "hack/images.sh", "build", "trainer-gpu",
    ]  # fmt: skip


def test_test_image_gpu_fails_rather_than_skips_without_the_gpu_image(
    make_dry_run: MakeDryRun,
) -> None:
    env, argv = find_command_with_env(make_dry_run("test-image-gpu"), "pytest")

    assert env == {"TFLAUNCH_REQUIRE_GPU_IMAGE": "1"}
    assert argv[-1] == "tests/image/test_gpu_image.py"


def test_images_smoke_runs_the_trainer_archive(make_dry_run: MakeDryRun) -> None:
    assert find_command(make_dry_run("images-smoke"), "images.sh") == ["hack/images.sh", "smoke"]


def test_push_without_registry_fails_with_a_message_before_doing_anything(make: Make) -> None:
    result = make("-n", "push")

    assert result.returncode != 0
    assert "REGISTRY is empty" in result.stderr
    assert "docker" not in result.stdout


def test_push_tags_into_the_registry_and_pushes(make_dry_run: MakeDryRun) -> None:
    output = make_dry_run("push", "REGISTRY=ghcr.io/acme/")

    pushed = f"ghcr.io/acme/tflaunch-trainer:{VERSION}"
    assert find_command(output, "docker", "tag") == [
        "docker",
        "tag",
        f"tflaunch-trainer:{VERSION}",
        pushed,
    ]
    assert find_command(output, "docker", "push") == ["docker", "push", pushed]


def test_kind_up_creates_the_cluster_from_its_config(make_dry_run: MakeDryRun) -> None:
    output = make_dry_run("kind-up")

    assert "kind create cluster --name tflaunch --config manifests/kind/cluster.yaml" in output


def test_kind_load_builds_the_cpu_image_and_loads_it(make_dry_run: MakeDryRun) -> None:
    output = make_dry_run("kind-load")

    kind_image = f"tflaunch-trainer:{VERSION}-cpu"
    build = docker_build(output)
    assert "VARIANT=cpu" in build
    assert option(build, "--tag") == kind_image
    load = find_command(output, "kind", "load", "docker-image")
    assert load[3] == kind_image
    assert option(load, "--name") == "tflaunch"


def test_kind_test_runs_the_script_with_the_kind_image_and_the_venv_tools(
    make_dry_run: MakeDryRun,
) -> None:
    env, argv = find_command_with_env(make_dry_run("kind-test"), "bash", "scripts/kind-test.sh")

    assert argv == ["bash", "scripts/kind-test.sh"]
    assert env["IMAGE"] == f"tflaunch-trainer:{VERSION}-cpu"
    assert env["CLUSTER"] == "tflaunch"
    assert env["WORKERS"] == "2"
    assert env["SPEC"] == "examples/mnist.yaml"
    assert env["TFLAUNCH"] == ".venv/bin/tflaunch"
    assert env["PYTHON"] == ".venv/bin/python"


def test_kind_load_operator_loads_the_operator_image_into_the_cluster(
    make_dry_run: MakeDryRun,
) -> None:
    output = make_dry_run("kind-load-operator")

    assert find_command(output, "kind", "load", "docker-image") == [
        "kind",
        "load",
        "docker-image",
        f"tflaunch-operator:{VERSION}",
        "--name",
        "tflaunch",
    ]
    assert "docker build" not in output, "make operator-image builds it"


def test_kind_load_operator_loads_the_image_operator_image_built(make_dry_run: MakeDryRun) -> None:
    variables = ("OPERATOR_IMAGE=reg.example/op", "OPERATOR_TAG=7", "CLUSTER=ci")
    built = option(docker_build(make_dry_run("operator-image", *variables)), "--tag")
    load = find_command(make_dry_run("kind-load-operator", *variables), "kind", "load")

    assert load[3] == built == "reg.example/op:7"
    assert option(load, "--name") == "ci"


def test_kind_operator_test_runs_the_script_with_both_loaded_images_and_the_venv_python(
    make_dry_run: MakeDryRun,
) -> None:
    env, argv = find_command_with_env(
        make_dry_run("kind-operator-test"), "bash", "scripts/kind-operator-test.sh"
    )

    assert argv == ["bash", "scripts/kind-operator-test.sh"]
    assert env["IMAGE"] == f"tflaunch-trainer:{VERSION}-cpu"
    assert env["OPERATOR_IMAGE"] == f"tflaunch-operator:{VERSION}"
    assert env["CLUSTER"] == "tflaunch"
    assert env["WORKERS"] == "2"
    example = yaml.safe_load((REPO / "examples" / "mnist.yaml").read_text())
    assert int(env["EPOCHS"]) < example["spec"]["trainer"]["epochs"], "a shorter run than the CLI's"
    assert env["SPEC"] == "examples/mnist.yaml"
    assert env["PYTHON"] == ".venv/bin/python"
    assert env["ARTIFACTS"] == "build/kind-test/operator", "inside what CI uploads"


def test_kind_operator_test_uses_a_namespace_of_its_own(make_dry_run: MakeDryRun) -> None:
    """kind-test deletes its namespace without waiting; reusing it would race the deletion."""
    cli, _ = find_command_with_env(make_dry_run("kind-test"), "bash", "scripts/kind-test.sh")
    operator, _ = find_command_with_env(
        make_dry_run("kind-operator-test"), "bash", "scripts/kind-operator-test.sh"
    )

    assert operator["NAMESPACE"] != cli["NAMESPACE"]


def test_kind_rig_test_runs_its_script_and_nothing_else_under_dry_run(
    make_dry_run: MakeDryRun,
) -> None:
    """The script brings the rig up and down: `make -n` must print it, not run it (a recipe
    line naming $(MAKE) would run even under -n)."""
    env, argv = find_command_with_env(
        make_dry_run("kind-rig-test"), "bash", "hack/kind-rig-test.sh"
    )

    assert argv == ["bash", "hack/kind-rig-test.sh"]
    assert env["PYTEST"] == ".venv/bin/pytest"


def test_kind_down_deletes_the_cluster(make_dry_run: MakeDryRun) -> None:
    assert "kind delete cluster --name tflaunch" in make_dry_run("kind-down")


def test_checkov_venv_installs_the_pinned_checkov_apart_from_the_dev_venv(
    make_dry_run: MakeDryRun,
) -> None:
    output = make_dry_run("-B", "checkov-venv")

    assert "-m venv .venv-checkov" in output
    assert ".venv-checkov/bin/pip install --quiet checkov==3.3.30" in output


def test_install_does_not_build_the_checkov_venv(make_dry_run: MakeDryRun) -> None:
    assert ".venv-checkov" not in make_dry_run("-B", "install")


def phony_targets() -> list[str]:
    makefile = (REPO / "Makefile").read_text()
    return sorted(
        {name for line in re.findall(r"^\.PHONY:(.*)$", makefile, re.M) for name in line.split()}
    )


def test_help_lists_every_target(make: Make) -> None:
    result = make("help")
    assert result.returncode == 0, result.stderr
    listed = {
        line.split()[0] for line in ANSI_ESCAPE.sub("", result.stdout).splitlines() if line.strip()
    }

    missing = [target for target in phony_targets() if target not in listed]
    assert not missing, f"targets without a `## help` comment: {missing}"


def test_shell_calls_in_the_makefile_only_read() -> None:
    """`make -n` must stay free of side effects: a $(shell) runs even under -n."""
    read_only = ("sed -n ", "git rev-parse ")
    calls = re.findall(r"\$\(shell ([^)]*)\)", (REPO / "Makefile").read_text())

    assert all(call.startswith(read_only) for call in calls), calls
