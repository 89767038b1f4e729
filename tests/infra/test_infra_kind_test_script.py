"""scripts/kind-test.sh against stand-ins for kind, kubectl and tflaunch.

The stand-ins record every call (argv and KUBECONFIG) and answer like the real tools would
for one scenario: the job succeeds, fails, times out, or its logs lack the result line. What
is checked is the script's side of the contract: what it submits, what it reads, what it
decides, and that it always cleans up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from launcher.contract import RESULT_LINE_PREFIX
from tests.infra._infra import REPO

STUB = textwrap.dedent(
    """\
    #!{python}
    import json, os, sys
    tool = os.path.basename(sys.argv[0])
    args = sys.argv[1:]
    with open(os.environ["STUB_LOG"], "a") as log:
        log.write(json.dumps({{"tool": tool, "args": args,
                              "kubeconfig": os.environ.get("KUBECONFIG")}}) + "\\n")
    scenario = json.loads(os.environ["STUB_SCENARIO"])
    if tool == "kind" and args[:2] == ["get", "kubeconfig"]:
        print("apiVersion: v1\\nkind: Config")
    elif tool == "kubectl" and args[:2] == ["get", "namespace"]:
        sys.exit(0 if scenario["namespace_exists"] else 1)
    elif tool == "kubectl" and args[:1] == ["logs"] and "-l" in args:
        sys.stdout.write(scenario["worker0_log"])
    elif tool == "kubectl" and args[:2] == ["get", "pods"]:
        print("pod/mnist-e2e-worker-0-abcde")
    elif tool == "kubectl" and args[:1] == ["logs"]:
        print("log of", args[3])
    elif tool == "tflaunch" and args[:1] == ["submit"]:
        sys.exit(scenario["submit_status"])
    elif tool == "tflaunch" and args[:1] == ["wait"]:
        sys.exit(scenario["wait_status"])
    elif tool == "tflaunch" and args[:1] == ["status"]:
        print("mnist-e2e: Failed")
    """
)

GOOD_LOG = f'epoch 3/3\n{RESULT_LINE_PREFIX}{{"accuracy": 0.97, "workers": 2}}\ndone\n'


@dataclass
class Run:
    status: int
    stderr: str
    calls: list[dict[str, Any]]
    artifacts: Path

    def argvs(self, tool: str) -> list[list[str]]:
        return [list(call["args"]) for call in self.calls if call["tool"] == tool]

    def called(self, tool: str, *prefix: str) -> bool:
        return any(argv[: len(prefix)] == list(prefix) for argv in self.argvs(tool))


def run_kind_test(
    tmp_path: Path,
    *,
    wait_status: int = 0,
    submit_status: int = 0,
    worker0_log: str = GOOD_LOG,
    namespace_exists: bool = False,
) -> Run:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("kind", "kubectl", "tflaunch"):
        stub = bin_dir / tool
        stub.write_text(STUB.format(python=sys.executable))
        stub.chmod(0o755)
    log = tmp_path / "calls.jsonl"
    artifacts = tmp_path / "artifacts"
    scenario = {
        "wait_status": wait_status,
        "submit_status": submit_status,
        "worker0_log": worker0_log,
        "namespace_exists": namespace_exists,
    }
    env = {
        **os.environ,
        "STUB_LOG": str(log),
        "STUB_SCENARIO": json.dumps(scenario),
        "IMAGE": "tflaunch-trainer:test-cpu",
        "ARTIFACTS": str(artifacts),
        "KIND": str(bin_dir / "kind"),
        "KUBECTL": str(bin_dir / "kubectl"),
        "TFLAUNCH": str(bin_dir / "tflaunch"),
        "PYTHON": sys.executable,
        "KUBECONFIG": "/the/users/own/kubeconfig",
    }
    for variable in ("CLUSTER", "NAME", "NAMESPACE", "WORKERS", "SPEC", "TIMEOUT"):
        env.pop(variable, None)
    result = subprocess.run(
        ["bash", "scripts/kind-test.sh"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return Run(result.returncode, result.stderr, calls, artifacts)


def test_a_successful_run_submits_waits_checks_the_result_and_cleans_up(tmp_path: Path) -> None:
    run = run_kind_test(tmp_path)

    assert run.status == 0, run.stderr
    assert run.argvs("tflaunch") == [
        [
            "submit",
            "examples/mnist.yaml",
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


def test_kubernetes_must_also_mark_the_job_complete(tmp_path: Path) -> None:
    run = run_kind_test(tmp_path)

    assert run.called("kubectl", "wait", "--for=condition=Complete", "job")


def test_every_cluster_call_goes_to_the_kind_clusters_own_kubeconfig(tmp_path: Path) -> None:
    run = run_kind_test(tmp_path)

    assert run.called("kind", "get", "kubeconfig", "--name", "tflaunch")
    kubeconfigs = {c["kubeconfig"] for c in run.calls if c["tool"] in ("kubectl", "tflaunch")}
    (kubeconfig,) = kubeconfigs
    assert kubeconfig != "/the/users/own/kubeconfig"
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
