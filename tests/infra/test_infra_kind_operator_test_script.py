"""scripts/kind-operator-test.sh against stand-ins for kind and kubectl.

The same stand-ins as for kind-test.sh (tests/infra/_stubs.py), playing the operator's side:
the MultiWorkerJob succeeds with a result in its status, fails, never finishes, or leaves
objects behind when deleted. What is checked is the script's side of the contract: what it
installs and applies, how it waits, what it decides, and that it always removes what it
created. The MultiWorkerJob it applies is generated for real, by the tests' Python.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.infra._infra import REPO
from tests.infra._stubs import USERS_KUBECONFIG, Answer, Run, rule, run_with_stubs

SCRIPT = "scripts/kind-operator-test.sh"
NAMESPACE = "tflaunch-operator-e2e"
MWJ = "mwj/mnist-e2e"
OWNED = "jobs,pods,services,networkpolicies"
LISTED = (
    "job.batch/mnist-e2e-worker\npod/mnist-e2e-worker-0-abcde\npod/mnist-e2e-worker-1-fghij\n"
    "service/mnist-e2e\nnetworkpolicy.networking.k8s.io/mnist-e2e\n"
)
RESULT = {"test_accuracy": 0.97, "test_loss": 0.09, "workers": 2}


def operator_manifests() -> list[dict[str, Any]]:
    documents = []
    for path in sorted((REPO / "manifests" / "operator").glob("*.yaml")):
        documents += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return documents


def the(kind: str) -> dict[str, Any]:
    (document,) = [d for d in operator_manifests() if d["kind"] == kind]
    return document


def status_json(result: dict[str, Any]) -> str:
    return json.dumps(
        {"kind": "MultiWorkerJob", "status": {"phase": "Succeeded", "result": result}}
    )


def run_operator_test(
    tmp_path: Path,
    *,
    wait: Answer | None = None,
    phase: str = "Running",
    result: dict[str, Any] = RESULT,
    owned_after_delete: str = "",
    rollout_status: int = 0,
    kubeconfig_status: int = 0,
    env: dict[str, str] | None = None,
) -> Run:
    rules = [
        rule("kind", "get kubeconfig", Answer("apiVersion: v1\nkind: Config\n", kubeconfig_status)),
        rule("kubectl", "rollout status", Answer(status=rollout_status)),
        rule("kubectl", "get namespace", Answer(status=1)),
        rule("kubectl", f"wait {MWJ}", wait or Answer()),
        rule("kubectl", "get mwj jsonpath={.status.phase}", Answer(phase)),
        rule("kubectl", "get mwj json", Answer(status_json(result))),
        rule("kubectl", "get mwj", Answer("BackoffLimitExceeded: worker 1 failed 4 times")),
        rule("kubectl", f"get {OWNED} -l", Answer(LISTED), Answer(owned_after_delete)),
        rule("kubectl", "get pods -l", Answer("pod/mnist-e2e-worker-0-abcde\n")),
        rule("kubectl", "logs", Answer("a log\n")),
    ]
    return run_with_stubs(
        tmp_path,
        SCRIPT,
        tools=("kind", "kubectl"),
        rules=rules,
        env={
            "IMAGE": "tflaunch-trainer:test-cpu",
            "OPERATOR_IMAGE": "tflaunch-operator:test",
            **(env or {}),
        },
        unset=(
            "CLUSTER",
            "NAME",
            "NAMESPACE",
            "WORKERS",
            "EPOCHS",
            "SPEC",
            "TIMEOUT",
            "POLL",
            "DELETE_TIMEOUT",
        ),
    )


def assert_everything_created_is_removed(run: Run) -> None:
    assert run.called("kubectl", "delete", "namespace", NAMESPACE)
    assert run.called("kubectl", "delete", "-f", "manifests/operator/")
    assert run.index("kubectl", "delete", "-f") == len(run.calls) - 1, "the operator goes last"


@pytest.fixture(scope="module")
def passed(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One successful run, read by several tests."""
    run = run_operator_test(tmp_path_factory.mktemp("passed"))
    assert run.status == 0, run.stderr
    return run


def test_a_successful_run_installs_applies_waits_deletes_and_removes_in_order(passed: Run) -> None:
    order = [
        passed.index("kind", "get", "kubeconfig", "--name", "tflaunch"),
        passed.index("kubectl", "apply", "-f", "manifests/operator/"),
        passed.index("kubectl", "wait", "--for=condition=Established"),
        passed.index("kubectl", "rollout", "status"),
        passed.index("kubectl", "create", "namespace", NAMESPACE),
        passed.index("kubectl", "apply", "-n", NAMESPACE, "-f"),
        passed.index("kubectl", "wait", MWJ),
        passed.index("kubectl", "get", "mwj", "mnist-e2e", "-n", NAMESPACE, "-o", "json"),
        passed.index("kubectl", "delete", "mwj", "mnist-e2e", "-n", NAMESPACE),
        passed.index("kubectl", "delete", "namespace", NAMESPACE),
        passed.index("kubectl", "delete", "-f", "manifests/operator/"),
    ]
    assert order == sorted(order)
    assert_everything_created_is_removed(passed)
    assert json.dumps(RESULT) in passed.stderr
    assert not (passed.artifacts / "operator.log").exists(), "diagnostics only on a failure"


def test_the_multiworkerjob_is_the_example_with_the_kind_image_fewer_epochs_and_two_workers(
    passed: Run,
) -> None:
    applied = yaml.safe_load((passed.artifacts / "multiworkerjob.yaml").read_text())
    example = yaml.safe_load((REPO / "examples" / "mnist.yaml").read_text())

    assert applied["kind"] == "MultiWorkerJob"
    assert applied["metadata"] == {"name": "mnist-e2e", "namespace": NAMESPACE}
    spec = applied["spec"]
    assert spec["image"] == "tflaunch-trainer:test-cpu"
    assert spec["imagePullPolicy"] == "IfNotPresent", "the image was loaded, not pushed"
    assert spec["workers"] == 2
    assert spec["gpusPerWorker"] == 0
    assert spec["trainer"]["epochs"] == 1 < example["spec"]["trainer"]["epochs"]
    unchanged = {"image", "imagePullPolicy", "workers", "gpusPerWorker", "trainer"}
    assert {k: v for k, v in spec.items() if k not in unchanged} == {
        k: v for k, v in example["spec"].items() if k not in unchanged
    }


def test_it_waits_for_the_succeeded_phase_with_kubectl_wait(passed: Run) -> None:
    (wait,) = [argv for argv in passed.argvs("kubectl") if argv[:2] == ["wait", MWJ]]

    assert "--for=jsonpath={.status.phase}=Succeeded" in wait
    assert wait[wait.index("-n") + 1] == NAMESPACE
    assert any(arg.startswith("--timeout=") for arg in wait)


def test_the_operator_installed_and_updated_is_the_one_in_manifests_operator(passed: Run) -> None:
    deployment = the("Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    namespace = deployment["metadata"]["namespace"]
    target = f"deployment/{deployment['metadata']['name']}"

    assert container["imagePullPolicy"] == "IfNotPresent", "kind-load-operator's image is used"
    assert passed.called(
        "kubectl",
        "set",
        "image",
        "-n",
        namespace,
        target,
        f"{container['name']}=tflaunch-operator:test",
    )
    assert passed.called("kubectl", "rollout", "status", "-n", namespace, target)
    crd = the("CustomResourceDefinition")["metadata"]["name"]
    assert passed.called("kubectl", "wait", "--for=condition=Established", f"crd/{crd}")


def test_deleting_the_multiworkerjob_must_take_its_objects_with_it(passed: Run) -> None:
    listing = ["get", OWNED, "-n", NAMESPACE, "-l", "tflaunch.dev/job-name=mnist-e2e"]
    lists = [i for i, call in enumerate(passed.calls) if call["args"][:6] == listing]

    assert len(lists) == 2, "once before the delete, once after"
    assert lists[0] < passed.index("kubectl", "delete", "mwj") < lists[1]
    assert (passed.artifacts / "owned.txt").read_text() == LISTED
    assert "its objects are gone" in passed.stderr


def test_every_cluster_call_goes_to_the_kind_clusters_own_kubeconfig(passed: Run) -> None:
    (kubeconfig,) = {c["kubeconfig"] for c in passed.calls if c["tool"] == "kubectl"}

    assert kubeconfig != USERS_KUBECONFIG
    assert not Path(str(kubeconfig)).exists(), "the temporary kubeconfig is removed at exit"


def assert_diagnostics_saved(run: Run) -> None:
    for saved in (
        "operator.log",
        "describe-operator.txt",
        "describe-multiworkerjob.txt",
        "multiworkerjob-status.yaml",
        "objects.txt",
        "events.txt",
        "mnist-e2e-worker-0-abcde.log",
    ):
        assert (run.artifacts / saved).exists(), saved
    assert run.called("kubectl", "logs", "-n", the("Deployment")["metadata"]["namespace"])


def test_a_failed_phase_ends_the_wait_at_once_saves_diagnostics_and_cleans_up(
    tmp_path: Path,
) -> None:
    run = run_operator_test(tmp_path, wait=Answer(status=1), phase="Failed")

    assert run.status == 3
    assert "failed: BackoffLimitExceeded" in run.stderr
    assert len([argv for argv in run.argvs("kubectl") if argv[:2] == ["wait", MWJ]]) == 1
    assert_diagnostics_saved(run)
    assert run.called("kubectl", "delete", "mwj", "mnist-e2e")
    assert_everything_created_is_removed(run)


def test_a_job_that_never_finishes_times_out_saves_diagnostics_and_cleans_up(
    tmp_path: Path,
) -> None:
    run = run_operator_test(tmp_path, wait=Answer(status=1), phase="Running", env={"TIMEOUT": "1"})

    assert run.status == 4
    assert "timed out after 1s, phase Running" in run.stderr
    waits = [argv for argv in run.argvs("kubectl") if argv[:2] == ["wait", MWJ]]
    assert waits and all("--timeout=1s" in argv for argv in waits), "no wait past the deadline"
    assert_diagnostics_saved(run)
    assert run.called("kubectl", "delete", "mwj", "mnist-e2e")
    assert_everything_created_is_removed(run)


@pytest.mark.parametrize(
    "result", [{}, {"test_loss": 0.1}, {"test_accuracy": "0.97"}], ids=["empty", "no-key", "text"]
)
def test_a_status_without_a_test_accuracy_fails_the_test(
    tmp_path: Path, result: dict[str, Any]
) -> None:
    run = run_operator_test(tmp_path, result=result)

    assert run.status == 1
    assert "no test_accuracy in .status.result" in run.stderr
    assert not run.called("kubectl", "get", OWNED, "-n", NAMESPACE, "-l"), "it stopped before"
    assert run.called(
        "kubectl", "delete", "mwj", "mnist-e2e", "-n", NAMESPACE, "--ignore-not-found"
    )
    assert_everything_created_is_removed(run)


def test_objects_left_after_the_delete_fail_the_test(tmp_path: Path) -> None:
    run = run_operator_test(
        tmp_path, owned_after_delete="job.batch/mnist-e2e-worker\n", env={"DELETE_TIMEOUT": "0"}
    )

    assert run.status == 1
    assert "still there 0s after the MultiWorkerJob was deleted: job.batch/mnist-e2e-worker" in (
        run.stderr
    )
    assert_everything_created_is_removed(run)


def test_an_operator_that_never_rolls_out_fails_before_any_job_and_is_removed(
    tmp_path: Path,
) -> None:
    run = run_operator_test(tmp_path, rollout_status=1)

    assert run.status == 1
    assert not run.called("kubectl", "create", "namespace")
    assert not run.called("kubectl", "apply", "-n", NAMESPACE)
    assert (run.artifacts / "operator.log").exists()
    assert run.called("kubectl", "delete", "-f", "manifests/operator/")


def test_without_the_kind_clusters_kubeconfig_nothing_else_is_called(tmp_path: Path) -> None:
    run = run_operator_test(tmp_path, kubeconfig_status=1)

    assert run.status == 1
    assert run.argvs("kubectl") == []
