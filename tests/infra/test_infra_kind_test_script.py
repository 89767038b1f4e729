"""scripts/kind-test.sh against stand-ins for kind, kubectl and tflaunch.

The stand-ins record every call (argv and KUBECONFIG) and answer like the real tools would
for one scenario: the job succeeds, fails, times out, or its logs lack the result line. What
is checked is the script's side of the contract: what it submits, what it reads, what it
decides, and that it always cleans up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.core.contract import RESULT_LINE_PREFIX
from tests.infra._stubs import USERS_KUBECONFIG, Answer, Run, rule, run_with_stubs

GOOD_LOG = f'epoch 3/3\n{RESULT_LINE_PREFIX}{{"accuracy": 0.97, "workers": 2}}\ndone\n'


def run_kind_test(
    tmp_path: Path,
    *,
    wait_status: int = 0,
    submit_status: int = 0,
    worker0_log: str = GOOD_LOG,
    namespace_exists: bool = False,
    nodes: str = "tflaunch-worker\ntflaunch-worker2\n",
) -> Run:
    rules = [
        rule("kind", "get kubeconfig", Answer("apiVersion: v1\nkind: Config\n")),
        rule("kubectl", "get namespace", Answer(status=0 if namespace_exists else 1)),
        rule("kubectl", "logs -l", Answer(worker0_log)),
        rule("kubectl", "get pods --field-selector=status.phase=Succeeded", Answer(nodes)),
        rule("kubectl", "get pods", Answer("pod/mnist-e2e-worker-0-abcde\n")),
        rule("kubectl", "logs", Answer("a worker's log\n")),
        rule("tflaunch", "submit", Answer(status=submit_status)),
        rule("tflaunch", "wait", Answer(status=wait_status)),
        rule("tflaunch", "status", Answer("mnist-e2e: Failed\n")),
    ]
    return run_with_stubs(
        tmp_path,
        "scripts/kind-test.sh",
        tools=("kind", "kubectl", "tflaunch"),
        rules=rules,
        env={"IMAGE": "tflaunch-trainer:test-cpu"},
        unset=("CLUSTER", "NAME", "NAMESPACE", "WORKERS", "SPEC", "TIMEOUT"),
    )


def test_a_successful_run_submits_waits_checks_the_result_and_cleans_up(tmp_path: Path) -> None:
    run = run_kind_test(tmp_path)

    assert run.status == 0, run.stderr
    submitted_spec = run.argvs("tflaunch")[0][1]
    assert submitted_spec.endswith("/spec.yaml"), "examples/mnist.yaml with one worker per node"
    assert run.argvs("tflaunch") == [
        [
            "submit",
            submitted_spec,
            "--name",
            "mnist-e2e",
            "-n",
            "tflaunch-e2e",
            "--image",
            "tflaunch-trainer:test-cpu",
            "--workers",
            "2",
            "--gpus",
            "0",
            "--set",
            "spec.imagePullPolicy=IfNotPresent",
        ],
        ["wait", "mnist-e2e", "-n", "tflaunch-e2e", "--timeout", "1500"],
        ["delete", "mnist-e2e", "-n", "tflaunch-e2e"],
    ]
    assert run.called("kubectl", "create", "namespace", "tflaunch-e2e")
    assert run.called("kubectl", "delete", "namespace", "tflaunch-e2e")
    assert '{"accuracy": 0.97, "workers": 2}' in run.stderr


def test_worker_0s_logs_are_read_by_its_completion_index_label_in_full(tmp_path: Path) -> None:
    run = run_kind_test(tmp_path)

    (logs,) = [argv for argv in run.argvs("kubectl") if argv[:1] == ["logs"]]
    selector = logs[logs.index("-l") + 1]
    assert set(selector.split(",")) == {
        "batch.kubernetes.io/job-completion-index=0",
        "tflaunch.dev/job-name=mnist-e2e",
    }
    assert "--tail=-1" in logs, "kubectl logs -l shows only 10 lines by default"
    assert (run.artifacts / "worker-0.log").read_text() == GOOD_LOG


def test_workers_on_fewer_nodes_than_there_are_workers_fail_the_test(tmp_path: Path) -> None:
    run = run_kind_test(tmp_path, nodes="tflaunch-worker\n")

    assert run.status == 1
    assert "did not train across nodes" in run.stderr


def test_kubernetes_must_also_mark_the_job_complete(tmp_path: Path) -> None:
    run = run_kind_test(tmp_path)

    assert run.called("kubectl", "wait", "--for=condition=Complete", "job")


def test_every_cluster_call_goes_to_the_kind_clusters_own_kubeconfig(tmp_path: Path) -> None:
    run = run_kind_test(tmp_path)

    assert run.called("kind", "get", "kubeconfig", "--name", "tflaunch")
    kubeconfigs = {c["kubeconfig"] for c in run.calls if c["tool"] in ("kubectl", "tflaunch")}
    (kubeconfig,) = kubeconfigs
    assert kubeconfig != USERS_KUBECONFIG
    assert not Path(str(kubeconfig)).exists(), "the temporary kubeconfig is removed at exit"


@pytest.mark.parametrize(("wait_status", "meaning"), [(3, "the job failed"), (4, "timed out")])
def test_a_failed_or_timed_out_job_fails_the_test_saves_logs_and_still_cleans_up(
    tmp_path: Path, wait_status: int, meaning: str
) -> None:
    run = run_kind_test(tmp_path, wait_status=wait_status)

    assert run.status == wait_status
    assert meaning in run.stderr
    assert run.called("tflaunch", "delete", "mnist-e2e")
    assert run.called("kubectl", "delete", "namespace", "tflaunch-e2e")
    for saved in ("status.txt", "objects.txt", "events.txt", "describe.txt"):
        assert (run.artifacts / saved).exists(), saved
    assert (run.artifacts / "mnist-e2e-worker-0-abcde.log").exists()


def test_a_failed_submit_still_deletes_what_it_may_have_created(tmp_path: Path) -> None:
    run = run_kind_test(tmp_path, submit_status=1)

    assert run.status == 1
    assert not run.called("tflaunch", "wait")
    assert run.called("tflaunch", "delete", "mnist-e2e")


@pytest.mark.parametrize(
    "worker0_log",
    [
        "epoch 3/3\ndone\n",
        f"[chief] {RESULT_LINE_PREFIX}{{}}\n",
    ],
    ids=["no-result-line", "prefix-not-at-line-start"],
)
def test_logs_without_the_result_line_fail_the_test(tmp_path: Path, worker0_log: str) -> None:
    run = run_kind_test(tmp_path, worker0_log=worker0_log)

    assert run.status == 1
    assert f"no line starting with '{RESULT_LINE_PREFIX}'" in run.stderr
    assert run.called("tflaunch", "delete", "mnist-e2e")


def test_a_result_line_that_is_not_json_fails_the_test(tmp_path: Path) -> None:
    run = run_kind_test(tmp_path, worker0_log=f"{RESULT_LINE_PREFIX}accuracy=0.97\n")

    assert run.status == 1
    assert "followed by JSON" in run.stderr


def test_a_namespace_that_existed_before_is_left_in_place(tmp_path: Path) -> None:
    run = run_kind_test(tmp_path, namespace_exists=True)

    assert run.status == 0, run.stderr
    assert not run.called("kubectl", "create", "namespace")
    assert not run.called("kubectl", "delete", "namespace")
    assert run.called("tflaunch", "delete", "mnist-e2e")
