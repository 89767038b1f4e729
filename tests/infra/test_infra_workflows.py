"""The GitHub workflows and the kind cluster they create, read as data."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.infra._infra import REPO

WORKFLOWS = REPO / ".github" / "workflows"
PINNED_ACTION = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
PINNED_NODE_IMAGE = re.compile(r"^kindest/node:v(\d+)\.(\d+)\.(\d+)@sha256:[0-9a-f]{64}$")


def load_workflow(name: str) -> dict[str, Any]:
    workflow: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the key `on` as the boolean True.
    if True in workflow:
        workflow["on"] = workflow.pop(True)
    return workflow


def steps_of(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    (job,) = workflow["jobs"].values()
    steps: list[dict[str, Any]] = job["steps"]
    return steps


def index_of_run(steps: list[dict[str, Any]], command: str) -> int:
    for i, step in enumerate(steps):
        if command in step.get("run", "").splitlines():
            return i
    raise AssertionError(f"no step runs `{command}`")


def uses(steps: list[dict[str, Any]], action: str) -> list[dict[str, Any]]:
    return [s for s in steps if s.get("uses", "").startswith(f"{action}@")]


@pytest.mark.parametrize("name", ["ci.yml", "e2e-kind.yml"])
def test_workflow_runs_on_pushes_pull_requests_and_by_hand(name: str) -> None:
    triggers = load_workflow(name)["on"]

    assert {"push", "pull_request", "workflow_dispatch"} <= set(triggers)


@pytest.mark.parametrize("name", ["ci.yml", "e2e-kind.yml"])
def test_workflow_uses_python_3_11_on_ubuntu(name: str) -> None:
    workflow = load_workflow(name)
    (job,) = workflow["jobs"].values()

    assert job["runs-on"] == "ubuntu-latest"
    (setup,) = uses(steps_of(workflow), "actions/setup-python")
    assert str(setup["with"]["python-version"]) == "3.11"


@pytest.mark.parametrize("name", ["ci.yml", "e2e-kind.yml"])
def test_workflow_pins_actions_by_commit_and_reads_only(name: str) -> None:
    workflow = load_workflow(name)

    assert workflow["permissions"] == {"contents": "read"}
    for step in steps_of(workflow):
        if "uses" in step:
            assert PINNED_ACTION.match(step["uses"]), f"{step['uses']} is not pinned by commit"


def test_ci_runs_the_unit_suite_entry_point() -> None:
    steps = steps_of(load_workflow("ci.yml"))

    index_of_run(steps, "bash .ci/run")


def test_e2e_installs_then_creates_loads_and_tests_in_order() -> None:
    steps = steps_of(load_workflow("e2e-kind.yml"))

    install = index_of_run(steps, "make install")
    kind = index_of_run(steps, "make kind-install")
    test = index_of_run(steps, "make kind-up kind-load kind-test")
    assert install < test
    assert kind < test
    assert "if" not in steps[test]


def test_e2e_runs_the_operator_test_on_the_same_cluster_after_the_cli_test() -> None:
    steps = steps_of(load_workflow("e2e-kind.yml"))

    cli = index_of_run(steps, "make kind-up kind-load kind-test")
    operator = index_of_run(steps, "make operator-image kind-load-operator kind-operator-test")
    assert cli < operator < index_of_run(steps, "make kind-down")
    assert "if" not in steps[operator]
    (upload,) = uses(steps, "actions/upload-artifact")
    assert operator < steps.index(upload)


def test_e2e_always_deletes_the_cluster_after_the_test() -> None:
    steps = steps_of(load_workflow("e2e-kind.yml"))

    down = index_of_run(steps, "make kind-down")
    assert down > index_of_run(steps, "make kind-up kind-load kind-test")
    assert steps[down]["if"] == "always()"


def test_e2e_uploads_the_logs_on_failure() -> None:
    steps = steps_of(load_workflow("e2e-kind.yml"))

    export = index_of_run(steps, "make kind-export-logs")
    (upload,) = uses(steps, "actions/upload-artifact")
    assert steps[export]["if"] == "failure()"
    assert upload["if"] == "failure()"
    assert upload["with"]["path"].rstrip("/") == "build/kind-test"
    assert steps.index(upload) < index_of_run(steps, "make kind-down")


def test_e2e_gives_the_workflow_a_time_limit() -> None:
    (job,) = load_workflow("e2e-kind.yml")["jobs"].values()

    assert 0 < job["timeout-minutes"] <= 120


# ---- manifests/kind/cluster.yaml -----------------------------------------------------------

CLUSTER = yaml.safe_load((REPO / "manifests" / "kind" / "cluster.yaml").read_text())


def test_kind_cluster_config_is_a_kind_v1alpha4_cluster() -> None:
    assert CLUSTER["kind"] == "Cluster"
    assert CLUSTER["apiVersion"] == "kind.x-k8s.io/v1alpha4"


def test_kind_cluster_has_one_control_plane_and_at_least_two_workers() -> None:
    roles = [node["role"] for node in CLUSTER["nodes"]]

    assert roles.count("control-plane") == 1
    assert roles.count("worker") >= 2
    assert set(roles) == {"control-plane", "worker"}


def test_kind_nodes_run_one_node_image_pinned_by_digest() -> None:
    images = {node["image"] for node in CLUSTER["nodes"]}

    assert len(images) == 1
    (image,) = images
    match = PINNED_NODE_IMAGE.match(image)
    assert match, f"{image} is not kindest/node:vX.Y.Z@sha256:..."
    # kind-test.sh selects worker 0 by the job-completion-index pod label (Kubernetes >= 1.28).
    assert (int(match[1]), int(match[2])) >= (1, 28)


def test_kind_install_script_pins_the_release_the_node_image_was_built_with() -> None:
    """kind supports a node image only with its own release: v0.30.0 shipped v1.34.0."""
    script = (REPO / "scripts" / "install-kind.sh").read_text()
    releases = {"v0.30.0": "kindest/node:v1.34.0@sha256:"}

    version = re.search(r"^readonly PINNED_VERSION=(\S+)$", script, re.M)
    assert version, "scripts/install-kind.sh has no PINNED_VERSION"
    assert version[1] in releases, f"add kind {version[1]}'s node image to this table"
    assert CLUSTER["nodes"][0]["image"].startswith(releases[version[1]])
