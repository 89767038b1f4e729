"""API failures become one line that says what failed and what to do, with the right exit code."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.cluster.client import Cluster
from launcher.core.errors import ClusterError, ClusterUnreachable, Conflict, ExitStatus, Forbidden
from tests.cluster.conftest import Result, cluster_at, job_objects, write_kubeconfig
from tests.cluster.fakeapi import FakeKubernetes

Tflaunch = Callable[..., Result]


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_rbac_denial_says_which_verb_on_which_resource_and_applies_nothing(
    tflaunch: Tflaunch, fake: FakeKubernetes
) -> None:
    fake.fail(
        "PATCH",
        r"/jobs/",
        403,
        'jobs.batch "mnist-worker" is forbidden: User "alice" cannot patch resource "jobs" '
        'in API group "batch" in the namespace "ml"',
    )

    result = tflaunch("submit", "-n", "ml")

    assert result.code == ExitStatus.ERROR
    assert one_line(result.err) == (
        "tflaunch: error: cannot patch jobs.batch in namespace ml: forbidden; ask your cluster "
        "admin for RBAC permission to patch jobs.batch in namespace ml "
        "(check with: kubectl auth can-i patch jobs.batch -n ml)"
    )
    assert fake.writes() == []


def test_a_missing_namespace_is_named_with_the_command_that_creates_it(
    tflaunch: Tflaunch, fake: FakeKubernetes
) -> None:
    fake.namespaces = {"default"}

    result = tflaunch("submit", "-n", "ml")

    assert result.code == ExitStatus.ERROR
    assert "namespace ml does not exist; create it (kubectl create namespace ml)" in one_line(
        result.err
    )


def test_an_unreachable_cluster_names_the_server_and_the_kubeconfig_context(
    tflaunch: Tflaunch, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{unused_port()}"
    config = write_kubeconfig(tmp_path / "unreachable", url)
    started = time.monotonic()

    result = tflaunch("status", "mnist", "--kubeconfig", str(config), connect=False)

    assert result.code == ExitStatus.ERROR
    assert one_line(result.err) == (
        f"tflaunch: error: cannot reach the Kubernetes API server at {url}: connection refused; "
        "check the kubeconfig context (kubectl config current-context, or --context/--kubeconfig)"
        " and that the cluster is running"
    )
    # A guard against retrying a refused connection for long, not a speed measure.
    assert time.monotonic() - started < 30


def test_unreachable_is_a_cluster_unreachable_error_raised_from_the_clients(
    fake: FakeKubernetes,
) -> None:
    api = cluster_at(f"http://127.0.0.1:{unused_port()}")

    with pytest.raises(ClusterUnreachable) as raised:
        api.list_objects("Job")

    assert raised.value.__cause__ is not None


def test_an_invalid_object_shows_the_servers_field_message_and_exits_2(
    tflaunch: Tflaunch, fake: FakeKubernetes
) -> None:
    fake.fail(
        "PATCH",
        r"/services/mnist$",
        422,
        'Service "mnist" is invalid',
        causes=[{"field": "spec.ports[0].port", "message": "must be between 1 and 65535"}],
    )

    result = tflaunch("submit")

    assert result.code == ExitStatus.BAD_INPUT
    assert one_line(result.err) == (
        "tflaunch: error: the API server rejected Service mnist in namespace default: "
        "spec.ports[0].port: must be between 1 and 65535"
    )


def test_a_changed_spec_exits_2_with_the_delete_or_replace_hint(tflaunch: Tflaunch) -> None:
    assert tflaunch("submit").code == 0

    result = tflaunch("submit", "--workers", "4")

    assert result.code == ExitStatus.BAD_INPUT
    assert "delete it first (tflaunch delete mnist -n default), or use --replace" in one_line(
        result.err
    )


def test_through_kubectl_the_hints_say_kubectl_tflaunch(
    tflaunch: Tflaunch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/kubectl-tflaunch"])
    assert tflaunch("submit").code == 0

    result = tflaunch("submit", "--workers", "4")

    assert "(kubectl tflaunch delete mnist -n default)" in result.err


def test_a_conflict_is_reported_with_the_servers_reason(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    fake.fail(
        "PATCH",
        r"/jobs/",
        409,
        'Operation cannot be fulfilled on jobs.batch "mnist-worker": the object has been modified',
    )

    with pytest.raises(Conflict, match=r"Job mnist-worker in namespace default: Operation cannot"):
        cluster.apply(job_objects()[-1])


def test_rejected_credentials_say_to_log_in_again(cluster: Cluster, fake: FakeKubernetes) -> None:
    fake.fail("GET", r"/pods$", 401, "Unauthorized")

    with pytest.raises(Forbidden, match=r"rejected the credentials \(401 Unauthorized\)"):
        cluster.list_objects("Pod")


def test_an_exceeded_quota_says_so_rather_than_blaming_rbac(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    fake.fail(
        "PATCH",
        r"/jobs/",
        403,
        'jobs.batch "mnist-worker" is forbidden: exceeded quota: gpu, requested: '
        "count/jobs.batch=1, used: count/jobs.batch=4, limited: count/jobs.batch=4",
    )

    with pytest.raises(Forbidden, match=r"exceeded quota: gpu.*ask for more quota"):
        cluster.apply(job_objects()[-1])


def test_a_server_error_is_one_cluster_error_with_status_and_message(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    fake.fail("GET", r"/jobs$", 500, "etcdserver: request timed out")

    with pytest.raises(ClusterError, match=r"list jobs.batch .*500.*etcdserver: request timed out"):
        cluster.list_objects("Job")


def test_a_missing_job_is_not_found_with_a_pointer_to_list(tflaunch: Tflaunch) -> None:
    result = tflaunch("status", "nope")

    assert result.code == ExitStatus.ERROR
    assert one_line(result.err) == (
        "tflaunch: error: job nope not found in namespace default; see tflaunch list -n default"
        " (or -A for every namespace)"
    )


def test_a_kubeconfig_that_does_not_exist_is_a_usage_error_naming_the_flag(
    tflaunch: Tflaunch, tmp_path: Path
) -> None:
    result = tflaunch("list", "--kubeconfig", str(tmp_path / "missing"), connect=False)

    assert result.code == ExitStatus.BAD_INPUT
    assert one_line(result.err).startswith("tflaunch: error: --kubeconfig: no kubeconfig at ")


def test_an_unknown_context_is_a_usage_error_naming_the_flag(tflaunch: Tflaunch) -> None:
    result = tflaunch("list", "--context", "nope")

    assert result.code == ExitStatus.BAD_INPUT
    line = one_line(result.err)
    assert line.startswith("tflaunch: error: --context: ")
    assert "see kubectl config get-contexts" in line


def test_the_contexts_namespace_is_the_default_for_job_commands(
    fake: FakeKubernetes, tmp_path: Path, tflaunch: Tflaunch
) -> None:
    config = write_kubeconfig(tmp_path / "ml", fake.url, namespace="ml")

    result = tflaunch("status", "mnist", "--kubeconfig", str(config), connect=False)

    assert "not found in namespace ml" in result.err
    assert any("/namespaces/ml/" in r.path for r in fake.requests)


@pytest.mark.parametrize(
    "args",
    [
        ["submit", "--timeout", "5"],
        ["submit", "--workers", "0"],
        ["logs", "mnist", "--since", "soon"],
        ["list", "-A", "-n", "ml"],
        ["wait", "mnist", "--timeout", "-1"],
    ],
)
def test_bad_input_is_one_line_exit_2_and_touches_nothing(
    tflaunch: Tflaunch, fake: FakeKubernetes, args: list[str]
) -> None:
    result = tflaunch(*args)

    assert result.code == ExitStatus.BAD_INPUT
    one_line(result.err)
    assert "Traceback" not in result.err
    assert fake.writes() == []
