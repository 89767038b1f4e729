"""The operator against a Kubernetes API mock over real HTTP: what it reads, writes, deletes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from launcher.core import contract
from launcher.operator import observe, reconcile
from launcher.operator.controller import ERROR_RETRY_SECONDS, Controller
from tests.operator.conftest import JOBS, MWJ, NETWORK_POLICIES, PODS, SERVICES, Api, later
from tests.operator.sim import RESULT, result_log


def _owners(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(r["kind"], r["name"], r["uid"]) for r in obj["metadata"].get("ownerReferences", [])]


async def test_creating_a_resource_creates_its_children_owned_by_it(api: Api):
    api.add_resource()
    outcome = await api.reconcile()
    owner = [("MultiWorkerJob", "mnist", "mwj-uid-1")]
    (service,) = api.objects(SERVICES).values()
    (policy,) = api.objects(NETWORK_POLICIES).values()
    (job,) = api.objects(JOBS).values()
    assert _owners(service) == _owners(policy) == _owners(job) == owner
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["completions"] == 2
    status = api.status()
    assert (status.phase, status.workers, status.restarts) == ("Created", "0/2", 0)
    assert [e.reason for e in outcome.plan.events] == ["Created"]
    (patch,) = api.requests("PATCH", MWJ)
    assert patch.url.path.endswith("/multiworkerjobs/mnist/status")  # the status subresource


async def test_a_second_reconcile_of_the_same_state_writes_nothing(api: Api):
    api.add_resource()
    await api.reconcile()
    api.run_jobs()
    await api.reconcile()
    writes = len([r for r in api.mock if r.method in ("POST", "PATCH", "DELETE")])
    await api.reconcile()
    assert len([r for r in api.mock if r.method in ("POST", "PATCH", "DELETE")]) == writes
    assert api.status().phase == "Running"


async def test_a_failed_worker_restarts_every_worker_and_counts_the_restart(api: Api):
    api.add_resource({"layout": "per-worker"})
    await api.reconcile()
    api.run_jobs()
    await api.reconcile()
    old_uids = {j["metadata"]["uid"] for j in api.objects(JOBS).values()}
    api.fail_worker(1, exit_code=1, message="collective timed out")
    outcome = await api.reconcile()
    deletions = api.requests("DELETE", JOBS)
    assert sorted(r.name for r in deletions) == ["mnist-worker-0", "mnist-worker-1"]
    assert all(r.params.get("propagationPolicy") == "Foreground" for r in deletions)
    assert api.status().phase == "Restarting"
    assert api.status().restarts == 1
    assert outcome.plan.events[0].type == "Warning"
    assert "worker 1" in outcome.plan.events[0].message
    await api.reconcile()  # the old Jobs are gone: the new group is created
    api.run_jobs()
    await api.reconcile()
    jobs = api.objects(JOBS)
    assert sorted(jobs) == ["mnist-worker-0", "mnist-worker-1"]
    assert not old_uids & {j["metadata"]["uid"] for j in jobs.values()}
    env = jobs["mnist-worker-1"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": contract.ENV_RESTARTS, "value": "1"} in env
    assert (api.status().phase, api.status().restarts) == ("Running", 1)


async def test_a_config_error_fails_the_job_at_once(api: Api):
    api.add_resource()
    await api.reconcile()
    api.run_jobs()
    await api.reconcile()
    api.fail_worker(0, exit_code=contract.EXIT_CONFIG_ERROR, message="TF_CONFIG index 5 >= 2")
    await api.reconcile()
    await api.reconcile()
    status = api.status()
    assert (status.phase, status.reason, status.restarts) == ("Failed", "ConfigError", 0)
    assert "TF_CONFIG index 5" in status.message
    assert not api.requests("DELETE", JOBS)
    assert len(api.requests("POST", JOBS)) == 1


async def test_success_records_the_chiefs_result_from_its_log(api: Api):
    api.add_resource()
    await api.reconcile()
    api.run_jobs()
    await api.reconcile()
    later(api, 300)
    api.complete(chief_log=result_log())
    await api.reconcile()
    status = api.status()
    assert (status.phase, status.result) == ("Succeeded", RESULT)
    assert status.completion_time == "2030-01-01T00:05:00Z"
    (log_request,) = [r for r in api.mock if r.url.path.endswith("/log")]
    assert log_request.params["tailLines"] == str(observe.LOG_TAIL_LINES)
    assert log_request.params["container"] == "trainer"


async def test_suspend_is_propagated_to_the_jobs_and_resume_undoes_it(api: Api):
    api.add_resource()
    await api.reconcile()
    api.run_jobs()
    await api.reconcile()
    api.mock.objects[MWJ, "default", "mnist"].patch({"spec": {"suspend": True},
                                                     "metadata": {"generation": 2}})  # fmt: skip
    await api.reconcile()
    assert api.objects(JOBS)["mnist-worker"]["spec"]["suspend"] is True
    (patch,) = api.requests("PATCH", JOBS)
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    assert api.status().phase == "Suspended"
    api.mock.objects[MWJ, "default", "mnist"].patch({"spec": {"suspend": False},
                                                     "metadata": {"generation": 3}})  # fmt: skip
    await api.reconcile()
    assert api.objects(JOBS)["mnist-worker"]["spec"]["suspend"] is False


async def test_a_finished_resource_is_deleted_after_its_ttl(api: Api):
    api.add_resource({"ttlSecondsAfterFinished": 30})
    await api.reconcile()
    api.run_jobs()
    api.complete(chief_log=result_log())
    await api.reconcile()
    outcome = await api.reconcile()
    assert outcome.plan.requeue_after == 30
    later(api, 31)
    await api.reconcile()
    assert api.resource() is None
    assert (await api.reconcile()).resource is None  # gone: nothing more to do


async def test_the_status_patch_removes_what_the_new_status_no_longer_has(api: Api):
    api.add_resource({"workers": 3})  # invalid: 256 does not split over 3
    await api.reconcile()
    assert "message" in api.resource()["status"]
    assert api.status().reason == "InvalidSpec"
    api.mock.objects[MWJ, "default", "mnist"].patch({"spec": {"workers": 4},
                                                     "metadata": {"generation": 2}})  # fmt: skip
    await api.reconcile()
    body = api.resource()["status"]
    assert body["phase"] == "Created" and "completionTime" not in body


async def test_an_api_failure_leaves_a_clear_error_and_the_next_reconcile_recovers(api: Api):
    api.add_resource()
    api.mock["get", "/apis/batch/v1/namespaces/default/jobs"][:1] << 500 << {"message": "etcd"}
    emitted: list[reconcile.Event] = []
    controller = Controller(api.cluster, lambda resource, event: emitted.append(event))
    delay = await controller._reconcile("default", "mnist")  # logged, not raised
    assert delay == ERROR_RETRY_SECONDS
    assert not api.objects(JOBS) and not emitted
    await api.reconcile()
    assert list(api.objects(JOBS)) == ["mnist-worker"]


async def test_the_controller_folds_events_during_a_reconcile_into_one_more_run(api: Api):
    api.add_resource()
    emitted: list[reconcile.Event] = []
    controller = Controller(api.cluster, lambda resource, event: emitted.append(event))
    await asyncio.gather(*(controller.trigger("default", "mnist") for _ in range(5)))
    gets = [r for r in api.requests("GET", MWJ) if r.name == "mnist"]
    assert len(gets) == 2  # the first run, and one more for the four events meanwhile
    assert [e.reason for e in emitted] == ["Created"]
    controller.stop()


async def test_the_events_are_posted_on_the_resource(api: Api):
    body = api.add_resource()
    emitted: list[tuple[str, str]] = []

    def emit(resource: dict[str, Any], event: reconcile.Event) -> None:
        emitted.append((resource["metadata"]["uid"], event.reason))

    controller = Controller(api.cluster, emit)
    await controller.trigger("default", "mnist")
    assert emitted == [(body["metadata"]["uid"], "Created")]
    json.dumps(api.resource())  # what the mock stored is plain JSON
    controller.stop()


async def test_pods_of_someone_elses_job_with_the_same_labels_are_ignored(api: Api):
    api.add_resource()
    await api.reconcile()
    api.run_jobs()
    api.mock.objects[PODS, "default", "stray"] = {
        "metadata": {"name": "stray", "labels": {"tflaunch.dev/job-name": "mnist"},
                     "ownerReferences": [{"kind": "Job", "name": "other", "uid": "x"}]},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {
            "terminated": {"exitCode": contract.EXIT_CONFIG_ERROR}}}]},
    }  # fmt: skip
    await api.reconcile()
    assert api.status().phase == "Running"


async def test_a_child_the_api_server_refuses_fails_the_job_until_the_spec_is_edited(api: Api):
    api.add_resource()
    refusal = {
        "kind": "Status", "code": 422, "reason": "Invalid", "message": "Job is invalid",
        "details": {"causes": [{"field": "spec.template.spec.tolerations[0].operator",
                                "message": "Unsupported value: \"Sometimes\""}]},
    }  # fmt: skip
    api.mock["post", "/apis/batch/v1/namespaces/default/jobs"][:1] << 422 << refusal
    outcome = await api.reconcile()
    status = api.status()
    assert (status.phase, status.reason) == ("Failed", "Rejected")
    assert "tolerations[0].operator" in status.message
    assert [e.reason for e in outcome.plan.events] == ["Rejected"]
    writes = len([r for r in api.mock if r.method in ("POST", "PATCH", "DELETE")])
    await api.reconcile()  # the same spec: no second attempt, no status write
    assert len([r for r in api.mock if r.method in ("POST", "PATCH", "DELETE")]) == writes


async def test_an_api_error_while_acting_is_reported_once_on_the_resource(api: Api):
    api.add_resource()
    api.mock["post", "/api/v1/namespaces/default/services"] << 403 << {
        "kind": "Status", "code": 403, "reason": "Forbidden",
        "message": 'services is forbidden: User "x" cannot create resource "services" in API '
                   'group "" in the namespace "default"',
    }  # fmt: skip
    emitted: list[reconcile.Event] = []
    controller = Controller(api.cluster, lambda resource, event: emitted.append(event))
    for _ in range(3):
        assert await controller._reconcile("default", "mnist") == ERROR_RETRY_SECONDS
        del api.mock.objects[SERVICES, "default", "mnist"]  # the mock stores refused objects
    (event,) = emitted
    assert (event.type, event.reason) == ("Warning", "ApiError")
    assert "cannot create services in namespace default" in event.message
    controller.stop()


async def test_a_result_that_cannot_be_read_still_ends_in_success(api: Api):
    api.add_resource()
    await api.reconcile()
    api.run_jobs()
    api.complete(chief_log=result_log())
    log = "/api/v1/namespaces/default/pods/mnist-worker-0-pod/log"
    (api.mock**10)["get", log] << 403 << {
        "kind": "Status", "code": 403, "reason": "Forbidden", "message": "pods/log is forbidden",
    }  # fmt: skip
    await api.reconcile()
    assert api.status().phase == "Succeeded"
    assert "no TFLAUNCH_RESULT line" in api.status().message
