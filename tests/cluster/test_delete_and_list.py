"""`tflaunch delete` removes everything of one job, idempotently; `list` finds the jobs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from launcher.cluster import apply
from launcher.cluster.client import Cluster
from tests.cluster.conftest import Result, job_objects
from tests.cluster.fakeapi import FakeKubernetes
from tests.cluster.objects import with_active, with_condition

Tflaunch = Callable[..., Result]


def test_delete_removes_the_jobs_pods_service_and_network_policy(
    tflaunch: Tflaunch, fake: FakeKubernetes, running_job: dict[str, Any]
) -> None:
    result = tflaunch("delete", "mnist")

    assert result.code == 0
    assert result.out.splitlines() == [
        "job.batch/mnist-worker deleted",
        "service/mnist deleted",
        "networkpolicy.networking.k8s.io/mnist-tf-peers deleted",
        "pod/mnist-worker-0-a0 deleted",
        "pod/mnist-worker-1-a0 deleted",
    ]
    assert fake.all() == []
    deletes = [r for r in fake.requests if r.method == "DELETE"]
    assert deletes and all(r.query["propagationPolicy"] == "Foreground" for r in deletes)


def test_deleting_twice_is_fine_and_says_nothing_to_delete(
    tflaunch: Tflaunch, cluster: Cluster
) -> None:
    apply.apply_job(cluster, job_objects())
    assert tflaunch("delete", "mnist").code == 0

    result = tflaunch("delete", "mnist")

    assert result.code == 0
    assert result.out == "nothing to delete: no objects of job mnist in namespace default\n"


def test_delete_leaves_other_jobs_alone(
    tflaunch: Tflaunch, cluster: Cluster, fake: FakeKubernetes
) -> None:
    apply.apply_job(cluster, job_objects())
    apply.apply_job(cluster, job_objects(metadata__name="other"))

    tflaunch("delete", "mnist")

    assert {o["metadata"]["name"] for o in fake.all()} == {
        "other",
        "other-worker",
        "other-tf-peers",
    }


def test_delete_of_a_per_worker_job_removes_every_workers_job(
    tflaunch: Tflaunch, cluster: Cluster, fake: FakeKubernetes
) -> None:
    apply.apply_job(cluster, job_objects(spec__layout="per-worker", spec__workers=4))

    result = tflaunch("delete", "mnist")

    assert result.code == 0
    assert fake.all() == []


def test_list_shows_the_jobs_of_the_namespace_with_state_and_age(
    tflaunch: Tflaunch, cluster: Cluster, fake: FakeKubernetes
) -> None:
    apply.apply_job(cluster, job_objects())
    apply.apply_job(cluster, job_objects(metadata__name="done", spec__layout="per-worker"))
    apply.apply_job(cluster, job_objects(metadata__name="elsewhere", metadata__namespace="ml"))
    fake.put(with_active(fake.get("Job", "mnist-worker"), 2))
    for i in range(2):
        fake.put(with_condition(fake.get("Job", f"done-worker-{i}"), "Complete"))

    result = tflaunch("list")

    rows = [line.split() for line in result.out.splitlines()]
    assert rows[0] == ["NAME", "LAYOUT", "WORKERS", "STATE", "AGE"]
    assert [row[:4] for row in rows[1:]] == [
        ["done", "per-worker", "2", "Succeeded"],
        ["mnist", "indexed", "2", "Running"],
    ]


def test_list_all_namespaces_adds_the_namespace_column(
    tflaunch: Tflaunch, cluster: Cluster
) -> None:
    apply.apply_job(cluster, job_objects())
    apply.apply_job(cluster, job_objects(metadata__name="elsewhere", metadata__namespace="ml"))

    result = tflaunch("list", "-A")

    rows = [line.split()[:2] for line in result.out.splitlines()]
    assert rows == [["NAMESPACE", "NAME"], ["default", "mnist"], ["ml", "elsewhere"]]


def test_an_empty_list_says_so_on_stderr(tflaunch: Tflaunch) -> None:
    result = tflaunch("list", "-n", "ml")

    assert (result.code, result.out) == (0, "")
    assert result.err == "no tflaunch jobs in namespace ml\n"
