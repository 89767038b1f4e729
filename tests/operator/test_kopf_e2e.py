"""The real kopf operator (our registry, login and handlers) against the mock API server:
`kubectl apply` of a MultiWorkerJob creates its Jobs; a Job's change updates the status."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import kmock as kmock_lib
import kopf
import pytest
from kubernetes import client

from launcher.operator.controller import Controller, kopf_event, registry
from tests.operator.conftest import EVENTS, JOBS, NAMESPACE, Api
from tests.operator.sim import resource

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def running_operator(api: Api) -> AsyncIterator[None]:
    """`tflaunch operator --all-namespaces` in a thread with its own event loop (as in the
    pod: kopf waits for every task of its loop on exit, so not in the mock server's loop)."""
    # Discovery only (nothing is read from them; kopf waits to see that they exist).
    api.mock.resources["v1/namespaces"] = kmock_lib.ResourceInfo(kind="Namespace", verbs={"list"})
    api.mock.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = (
        kmock_lib.ResourceInfo(kind="CustomResourceDefinition", verbs={"list"})
    )
    ready, stop = threading.Event(), threading.Event()
    controller = Controller(api.cluster, kopf_event)
    thread = threading.Thread(
        target=kopf.run,
        kwargs={
            "registry": registry,
            "memo": kopf.Memo(controller=controller),
            "standalone": True,
            "clusterwide": True,
            "ready_flag": ready,
            "stop_flag": stop,
        },
        daemon=True,
    )
    thread.start()
    try:
        assert await asyncio.to_thread(ready.wait, 10), "the operator did not start"
        yield
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 10)
        assert not thread.is_alive(), "the operator did not stop"


async def eventually(check: Callable[[], Any], seconds: float = 10) -> Any:
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        value = check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {seconds}s: {check.__doc__ or check}")
        await asyncio.sleep(0.05)


async def test_applying_a_resource_runs_it_and_job_changes_reach_its_status(api: Api):
    body = resource()
    body["metadata"] = {"name": "mnist", "namespace": NAMESPACE, "uid": "uid-e2e", "generation": 1}
    batch = client.BatchV1Api(api.cluster.api_client)
    async with running_operator(api):
        await api.create_resource(body)
        await eventually(lambda: "mnist-worker" in api.objects(JOBS))
        await eventually(lambda: api.status().phase == "Created")
        # The Job controller reports both workers ready: a Job event, not a resource event.
        await asyncio.to_thread(
            batch.patch_namespaced_job_status,
            "mnist-worker", NAMESPACE, {"status": {"active": 2, "ready": 2}},
        )  # fmt: skip
        await eventually(lambda: api.status().phase == "Running")

        def posted() -> set[str]:
            """the operator's events on the resource (kopf posts them with generateName,
            which the mock cannot store twice: read the requests)"""
            return {
                r.data["reason"]
                for r in api.requests("POST", EVENTS)
                if r.data["involvedObject"]["name"] == "mnist"
            }

        await eventually(lambda: {"Created", "Running"} <= posted())
    (job,) = api.objects(JOBS).values()
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-e2e"
    assert not api.resource()["metadata"].get("finalizers")  # deletable without the operator
    assert not any(
        key.startswith("kopf.zalando.org")
        for key in (api.resource()["metadata"].get("annotations") or {})
    )


async def test_a_failed_job_restarts_the_group_on_watch_events_alone(api: Api):
    body = resource()
    body["metadata"] = {"name": "mnist", "namespace": NAMESPACE, "uid": "uid-e2e", "generation": 1}
    batch = client.BatchV1Api(api.cluster.api_client)
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}

    def restarted() -> bool:
        """a new Job for the workers, with the restart counted"""
        job = api.objects(JOBS).get("mnist-worker")
        return bool(job and not job.get("status") and api.status().restarts == 1)

    async with running_operator(api):
        await api.create_resource(body)
        await eventually(lambda: "mnist-worker" in api.objects(JOBS))
        await asyncio.to_thread(
            batch.patch_namespaced_job_status,
            "mnist-worker", NAMESPACE, {"status": {"failed": 1, "conditions": [failed]}},
        )  # fmt: skip
        await eventually(restarted)
    assert [r.name for r in api.requests("DELETE", JOBS)] == ["mnist-worker"]
    assert len(api.requests("POST", JOBS)) == 2
    (job,) = api.objects(JOBS).values()
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "TFLAUNCH_RESTARTS", "value": "1"} in env
