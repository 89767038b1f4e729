"""A Kubernetes API mock over real HTTP (kmock), the operator's Cluster pointed at it,
and a test that plays the Job controller and the kubelet through that same API."""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
from collections.abc import AsyncIterator
from typing import Any

import kmock as kmock_lib
import pytest
from kubernetes import client

from launcher.cluster.client import Cluster
from launcher.core import contract, labels
from launcher.operator import controller, crd
from tests.operator.sim import T0, resource

MWJ = f"{crd.API_VERSION}/{crd.PLURAL}"
JOBS = "batch/v1/jobs"
PODS = "v1/pods"
SERVICES = "v1/services"
NETWORK_POLICIES = "networking.k8s.io/v1/networkpolicies"
EVENTS = "v1/events"
NAMESPACE = "default"

RESOURCES = {
    MWJ: kmock_lib.ResourceInfo(
        kind=crd.KIND, singular=crd.SINGULAR, namespaced=True, subresources={"status"},
        verbs={"get", "list", "watch", "patch", "delete", "create", "update"},
    ),
    JOBS: kmock_lib.ResourceInfo(
        kind="Job", singular="job", namespaced=True, subresources={"status"},
        verbs={"get", "list", "watch", "patch", "delete", "create"},
    ),
    PODS: kmock_lib.ResourceInfo(
        kind="Pod", singular="pod", namespaced=True, subresources={"log", "status"},
        verbs={"get", "list", "watch", "delete"},
    ),
    SERVICES: kmock_lib.ResourceInfo(kind="Service", singular="service", namespaced=True,
                                     verbs={"get", "list", "create"}),
    NETWORK_POLICIES: kmock_lib.ResourceInfo(kind="NetworkPolicy", singular="networkpolicy",
                                             namespaced=True, verbs={"get", "list", "create"}),
    EVENTS: kmock_lib.ResourceInfo(kind="Event", singular="event", namespaced=True,
                                   verbs={"create", "list"}),
}  # fmt: skip


class Api:
    """The mock API server, from the operator's side and from Kubernetes' side."""

    def __init__(self, mock: Any, cluster: Cluster) -> None:
        self.mock = mock
        self.cluster = cluster
        self.now = T0
        self._uids = itertools.count(1)

    # -- objects as stored by the mock server

    def add_resource(self, spec: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
        body = resource(spec)
        body["metadata"].update(metadata)
        self.mock.objects[MWJ, NAMESPACE, body["metadata"]["name"]] = body
        return body

    def resource(self, name: str = "mnist") -> dict[str, Any] | None:
        obj = self.mock.objects[MWJ, NAMESPACE, name]
        return None if obj.deleted else copy.deepcopy(obj.raw)

    def status(self, name: str = "mnist") -> crd.Status:
        return crd.status_from_document((self.resource(name) or {}).get("status"))

    def objects(self, kind: str) -> dict[str, dict[str, Any]]:
        """Live objects of one resource, by name (as the API would list them)."""
        return {
            name: obj.raw
            for (res, _, name), obj in self.mock.objects.items()
            if res == kmock_lib.resource(kind) and not obj.deleted
        }

    def requests(self, method: str, kind: str) -> list[Any]:
        wanted = kmock_lib.resource(kind)
        return [r for r in self.mock if r.method == method and r.resource == wanted]

    async def create_resource(self, body: dict[str, Any]) -> None:
        """Create a MultiWorkerJob through the API, as kubectl would (the watches see it)."""
        custom = client.CustomObjectsApi(self.cluster.api_client)
        await asyncio.to_thread(
            custom.create_namespaced_custom_object,
            crd.GROUP, crd.VERSION, NAMESPACE, crd.PLURAL, body,
        )  # fmt: skip

    # -- the operator

    async def reconcile(self, name: str = "mnist") -> controller.Outcome:
        self.collect_garbage()
        return await asyncio.to_thread(
            controller.reconcile_once, self.cluster, NAMESPACE, name, self.now
        )

    # -- the Job controller, the garbage collector and the kubelet

    def collect_garbage(self) -> None:
        """Delete the pods of deleted Jobs, as the garbage collector does (with foreground
        deletion, before the Job itself is gone)."""
        jobs = {j["metadata"].get("uid") for j in self.objects(JOBS).values()}
        for name, pod in self.objects(PODS).items():
            owners = {o.get("uid") for o in pod["metadata"].get("ownerReferences") or []}
            if owners and not owners & jobs:
                del self.mock.objects[PODS, NAMESPACE, name]

    def run_jobs(self) -> None:
        """Give new Jobs a uid and running, ready pods (unless suspended)."""
        for name, job in self.objects(JOBS).items():
            key = (JOBS, NAMESPACE, name)
            if not job["metadata"].get("uid"):
                self.mock.objects[key].patch({"metadata": {"uid": f"job-{next(self._uids)}"}})
                job = self.mock.objects[key].raw
            if job["spec"].get("suspend"):
                continue
            count = _completions(job)
            for i in range(count):
                self._pod(job, i, "Running", {"running": {}})
            self.mock.objects[key].patch({"status": {"active": count, "ready": count}})

    def fail_worker(self, index: int, exit_code: int, message: str = "") -> None:
        """Worker `index` exits; its Job (backoffLimit 0) fails, as Kubernetes would."""
        job_name = f"mnist-worker-{index}" if self._per_worker() else "mnist-worker"
        job = self.objects(JOBS)[job_name]
        terminated = {"exitCode": exit_code, "reason": "Error", "message": message}
        self._pod(job, index, "Failed", {"terminated": terminated})
        config_error = exit_code == contract.EXIT_CONFIG_ERROR
        reason = "PodFailurePolicy" if config_error else "BackoffLimitExceeded"
        failed = {"type": "Failed", "status": "True", "reason": reason}
        self.mock.objects[JOBS, NAMESPACE, job_name].patch(
            {"status": {"failed": 1, "active": 0, "ready": 0, "conditions": [failed]}}
        )

    def complete(self, chief_log: str) -> None:
        """Every worker exits 0; the chief's log holds `chief_log`."""
        for name, job in self.objects(JOBS).items():
            count = _completions(job)
            for i in range(count):
                self._pod(job, i, "Succeeded", {"terminated": {"exitCode": 0}})
            complete = {"type": "Complete", "status": "True"}
            self.mock.objects[JOBS, NAMESPACE, name].patch(
                {"status": {"succeeded": count, "active": 0, "ready": 0, "conditions": [complete]}}
            )
        chief = self._pod_name("mnist-worker-0" if self._per_worker() else "mnist-worker", 0)
        self.mock["get", f"/api/v1/namespaces/{NAMESPACE}/pods/{chief}/log"] << chief_log.encode()

    def _per_worker(self) -> bool:
        return "mnist-worker" not in self.objects(JOBS)

    def _pod_name(self, job_name: str, index: int) -> str:
        return f"{job_name}-{index}-pod"

    def _pod(self, job: dict[str, Any], index: int, phase: str, state: dict[str, Any]) -> None:
        """Create or update one worker pod of `job` (owned by it, labelled like its template)."""
        template = job["spec"]["template"]
        indexed = job["spec"].get("completionMode") == "Indexed"
        name = self._pod_name(job["metadata"]["name"], index if indexed else 0)
        owner = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "controller": True,
            "name": job["metadata"]["name"],
            "uid": job["metadata"]["uid"],
        }
        self.mock.objects[PODS, NAMESPACE, name] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "uid": f"pod-{job['metadata']['uid']}-{index}",
                "labels": template["metadata"]["labels"],
                "annotations": {labels.COMPLETION_INDEX: str(index)} if indexed else {},
                "ownerReferences": [owner],
            },
            "spec": template["spec"],
            "status": {"phase": phase, "containerStatuses": [{"name": "trainer", "state": state}]},
        }


def _completions(job: dict[str, Any]) -> int:
    return int(job["spec"].get("completions") or 1)


@pytest.fixture
async def api(kmock: Any) -> AsyncIterator[Api]:
    for kind, info in RESOURCES.items():
        kmock.resources[kind] = info
    configuration = client.Configuration()
    configuration.host = str(kmock.url).rstrip("/")
    cluster = Cluster(client.ApiClient(configuration), namespace=NAMESPACE)
    try:
        yield Api(kmock, cluster)
    finally:
        cluster.close()


def later(api: Api, seconds: float) -> None:
    api.now += datetime.timedelta(seconds=seconds)
