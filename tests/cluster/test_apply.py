"""Submitting: server-side apply, all or nothing, idempotent, with owner references."""

from __future__ import annotations

import pytest

from launcher.cluster import apply
from launcher.cluster.client import Cluster
from launcher.core import exit_policy, labels
from launcher.core.errors import Conflict, Invalid, SpecChanged
from tests.cluster.conftest import job_objects
from tests.cluster.fakeapi import FakeKubernetes


def stored(fake: FakeKubernetes) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in fake.all()}


def test_submitting_creates_the_service_network_policy_and_indexed_job(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    applied = apply.apply_job(cluster, job_objects())

    assert [(a.kind, a.name, a.action) for a in applied] == [
        ("Service", "mnist", "created"),
        ("NetworkPolicy", "mnist-tf-peers", "created"),
        ("Job", "mnist-worker", "created"),
    ]
    assert set(stored(fake)) == {
        ("Service", "mnist"),
        ("NetworkPolicy", "mnist-tf-peers"),
        ("Job", "mnist-worker"),
    }
    patches = [r for r in fake.writes() if r.method == "PATCH"]
    assert all(r.query["fieldManager"] == "tflaunch" for r in patches)


def test_submitting_the_same_spec_twice_writes_nothing_the_second_time(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    apply.apply_job(cluster, job_objects())
    before = stored(fake)
    writes = len(fake.writes())

    applied = apply.apply_job(cluster, job_objects())

    assert {a.action for a in applied} == {"unchanged"}
    assert len(fake.writes()) == writes
    assert stored(fake) == before


def test_a_changed_spec_for_an_existing_job_is_refused_and_nothing_is_applied(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    apply.apply_job(cluster, job_objects())
    before = stored(fake)
    writes = len(fake.writes())

    with pytest.raises(SpecChanged) as refused:
        apply.apply_job(cluster, job_objects(spec__workers=4, metadata__name="mnist"))

    message = str(refused.value)
    assert "delete it first (tflaunch delete mnist -n default), or use --replace" in message
    assert "spec.template: field is immutable" in message
    assert len(fake.writes()) == writes  # not even the Service, which would have changed
    assert stored(fake) == before


def test_the_hint_names_the_program_the_user_ran(cluster: Cluster) -> None:
    apply.apply_job(cluster, job_objects())

    with pytest.raises(SpecChanged, match=r"kubectl tflaunch delete mnist"):
        apply.apply_job(cluster, job_objects(spec__workers=4), program="kubectl tflaunch")


def test_replace_deletes_the_old_objects_then_creates_the_new_ones(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    apply.apply_job(cluster, job_objects())
    old_uid = fake.get("Job", "mnist-worker")["metadata"]["uid"]

    apply.apply_job(cluster, job_objects(spec__workers=4), replace=True)

    job = fake.get("Job", "mnist-worker")
    assert job["metadata"]["uid"] != old_uid
    assert job["spec"]["completions"] == 4
    deletes = [r for r in fake.requests if r.method == "DELETE"]
    assert all(r.query.get("propagationPolicy") == "Foreground" for r in deletes)


def test_replace_refuses_an_invalid_new_spec_before_deleting_anything(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    apply.apply_job(cluster, job_objects())
    before = stored(fake)
    fake.fail(
        "POST",
        r"/jobs$",
        422,
        "Job.batch is invalid",
        causes=[{"field": "spec.completions", "message": "must be less than 1000"}],
    )

    with pytest.raises(Invalid, match=r"spec.completions: must be less than 1000"):
        apply.apply_job(cluster, job_objects(spec__workers=4), replace=True)

    assert not [r for r in fake.requests if r.method == "DELETE"]
    assert stored(fake) == before


def test_replace_sends_every_object_as_rendered_not_through_the_clients_models(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    # kubernetes 37's typed create methods validate the body with pydantic models: an integer
    # quantity (which the API server takes) failed there as an internal error (issue 27 item 1)
    objects = job_objects(spec__gpusPerWorker=1)
    job = next(o for o in objects if o["kind"] == "Job")
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1
    apply.apply_job(cluster, job_objects())

    apply.apply_job(cluster, objects, replace=True)

    creates = [r for r in fake.requests if r.method == "POST" and r.path.endswith("/jobs")]
    assert [r.dry_run for r in creates] == [True]  # checked before the old Job is deleted
    for sent in [r.body for r in creates] + [fake.get("Job", "mnist-worker")]:
        assert sent["spec"] == job["spec"]


def test_a_dry_run_checks_with_the_server_and_stores_nothing(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    applied = apply.apply_job(cluster, job_objects(), dry_run=True)

    assert {a.action for a in applied} == {"created"}
    assert fake.all() == []
    assert all(r.query.get("dryRun") == "All" for r in fake.requests if r.method == "PATCH")


def test_a_rejected_object_stops_the_submission_before_anything_is_written(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    fake.fail(
        "PATCH",
        r"/jobs/mnist-worker$",
        422,
        'Job.batch "mnist-worker" is invalid',
        causes=[{"field": "spec.template.spec.containers[0].image", "message": "Required value"}],
    )

    with pytest.raises(Invalid, match=r"containers\[0\].image: Required value"):
        apply.apply_job(cluster, job_objects())

    assert fake.writes() == []
    assert fake.all() == []


def test_the_service_and_network_policy_are_owned_by_the_indexed_job(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    apply.apply_job(cluster, job_objects())
    job = fake.get("Job", "mnist-worker")

    for kind, name in (("Service", "mnist"), ("NetworkPolicy", "mnist-tf-peers")):
        (reference,) = fake.get(kind, name)["metadata"]["ownerReferences"]
        assert reference["kind"] == "Job"
        assert reference["name"] == "mnist-worker"
        assert reference["uid"] == job["metadata"]["uid"]
        assert reference["blockOwnerDeletion"] is False


def test_deleting_the_job_garbage_collects_its_service_and_network_policy(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    apply.apply_job(cluster, job_objects())

    cluster.delete("Job", "mnist-worker")  # what kubectl delete job, or the Job's TTL, does

    assert fake.all() == []


def test_per_worker_jobs_hand_ownership_to_worker_zero(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    applied = apply.apply_job(cluster, job_objects(spec__layout="per-worker", spec__workers=4))

    assert [a.name for a in applied if a.kind == "Job"] == [
        "mnist-worker-0",
        "mnist-worker-1",
        "mnist-worker-2",
        "mnist-worker-3",
    ]
    (reference,) = fake.get("Service", "mnist")["metadata"]["ownerReferences"]
    assert reference["name"] == "mnist-worker-0"


def test_a_second_submission_keeps_the_owner_references(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    apply.apply_job(cluster, job_objects())
    apply.apply_job(cluster, job_objects())

    assert fake.get("Service", "mnist")["metadata"]["ownerReferences"]


def test_an_object_of_the_same_name_that_is_not_the_jobs_is_left_alone(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    fake.put(
        {
            "kind": "Service",
            "metadata": {"name": "mnist", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"clusterIP": "10.0.0.1"},
        }
    )

    with pytest.raises(Conflict, match=r"Service mnist already exists .* belongs to something"):
        apply.apply_job(cluster, job_objects())

    assert fake.writes() == []


def test_submitted_objects_carry_the_jobs_labels(cluster: Cluster, fake: FakeKubernetes) -> None:
    apply.apply_job(cluster, job_objects())

    for obj in fake.all():
        assert obj["metadata"]["labels"][labels.JOB_NAME] == "mnist"


def test_a_server_that_fails_midway_is_reported_with_what_was_written_and_how_to_converge(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    """Issue 27 item 16: every check passed, then the server answered 503 for the third Job."""
    objects = job_objects(spec__layout="per-worker", spec__workers=4)
    fake.fail("PATCH", r"/jobs/mnist-worker-2$", 503, "etcdserver: leader changed",
              writes_only=True)  # fmt: skip

    with pytest.raises(apply.PartiallyApplied) as caught:
        apply.apply_job(cluster, objects)

    message = str(caught.value)
    assert "Job mnist-worker-0, Job mnist-worker-1" in message
    assert "not yet: 2 (Job mnist-worker-2, Job mnist-worker-3)" in message
    assert "tflaunch submit` again" in message and "503" in message
    fake.failures.clear()
    applied = apply.apply_job(cluster, objects)
    assert {a.name: a.action for a in applied if a.kind == "Job"} == {
        "mnist-worker-0": "unchanged", "mnist-worker-1": "unchanged",
        "mnist-worker-2": "created", "mnist-worker-3": "created",
    }  # fmt: skip


OLD_SERVER = {
    "causes": [
        {
            "field": "spec.template.spec.containers[0].restartPolicy",
            "message": "Forbidden: may not be set for non-init containers",
        }
    ]
}
"""What a Kubernetes 1.28 to 1.33 API server answers to a Job whose regular container has a
restartPolicy (the container restart rules, 1.35's): it knows the field for sidecars only."""


def _trainer(job: dict) -> dict:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


def test_a_server_that_refuses_the_container_restart_rules_gets_the_job_without_them(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    """The default restart in place on a cluster before 1.34: the wrappers still restart the
    program in place; the kubelet's restart of a killed container is what is given up."""
    fake.fail("PATCH", r"/jobs/mnist-worker$", 422, "Job is invalid", times=1, **OLD_SERVER)

    applied = apply.apply_job(cluster, job_objects())

    assert [a.action for a in applied] == ["created"] * 3
    trainer = _trainer(stored(fake)[("Job", "mnist-worker")])
    assert "restartPolicyRules" not in trainer and "restartPolicy" not in trainer
    assert "--restart-in-place" in trainer["args"]
    assert exit_policy.restart_rules_dropped(stored(fake)[("Job", "mnist-worker")])


def test_the_operators_create_falls_back_the_same_way(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    (job,) = [o for o in job_objects() if o["kind"] == "Job"]
    fake.fail("POST", r"/jobs$", 422, "Job is invalid", times=1, **OLD_SERVER)

    assert apply.create_object(cluster, job) is not None

    assert "restartPolicyRules" not in _trainer(stored(fake)[("Job", "mnist-worker")])


def test_a_refusal_with_no_rules_to_drop_is_the_answer(
    cluster: Cluster, fake: FakeKubernetes
) -> None:
    (job,) = [o for o in job_objects(spec__restart="recreate") if o["kind"] == "Job"]
    fake.fail("POST", r"/jobs$", 422, "Job is invalid", times=1, **OLD_SERVER)

    with pytest.raises(Invalid, match="non-init containers"):
        apply.create_object(cluster, job)
