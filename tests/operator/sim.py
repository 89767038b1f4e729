"""A small, in-memory stand-in for the API server and the Job controller, for `decide()`.

It applies a `Plan` the way the API server would (status, deletions that complete at once,
merge patches, creations with fresh uids) and lets a test play the Job controller and the
kubelet: start workers, fail one with an exit code, complete the job. Only what the operator
reads is modelled: Job conditions, `status.ready`, pods with owner references and a trainer
container's terminated state.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import itertools
import json
from typing import Any

import yaml

from launcher.core import contract
from launcher.core.timestamps import format_time
from launcher.operator import crd, observe, progress, reconcile

T0 = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
RESULT = {"test_accuracy": 0.9812, "test_loss": 0.061, "epochs": 3}
_uids = itertools.count(1)


def resource(
    spec: dict[str, Any] | None = None, path: str = "examples/mnist.yaml"
) -> dict[str, Any]:
    """A MultiWorkerJob as the API server returns it: the example plus uid and generation."""
    with open(path) as f:
        body = yaml.safe_load(f)
    body["spec"].update(spec or {})
    body["metadata"].update({"uid": "mwj-uid-1", "generation": 1})
    return body


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """JSON merge patch (RFC 7386), as the API server applies it."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


@dataclasses.dataclass
class Cluster:
    resource: dict[str, Any]
    jobs: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    others: dict[tuple[str, str], dict[str, Any]] = dataclasses.field(default_factory=dict)
    now: datetime.datetime = T0
    chief_log: str | None = None
    workloads: list[dict[str, Any]] | None = None
    """Kueue's Workloads as the operator would read them (None: not readable)."""
    pod_warnings: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    """Warning events by pod name, as the operator reads them for pods in ContainerCreating."""
    events: list[reconcile.Event] = dataclasses.field(default_factory=list)
    plans: list[reconcile.Plan] = dataclasses.field(default_factory=list)
    deleted: bool = False
    keep_terminating: bool = False
    """Deleted Jobs stay, with a deletionTimestamp, until `finish_deletions()`."""

    # -- the operator's side

    def observed(self) -> observe.Observed:
        observed = observe.Observed(
            resource=copy.deepcopy(self.resource),
            jobs=[copy.deepcopy(j) for j in self.jobs.values()],
            pods=[copy.deepcopy(p) for p in self.pods.values()],
            now=self.now,
            workloads=copy.deepcopy(self.workloads),
            pod_warnings=copy.deepcopy(self.pod_warnings),
        )
        old = crd.status_from_document(observed.resource.get("status"))
        if observe.chief_log_wanted(observed) or progress.log_wanted(observed, old):
            observed = dataclasses.replace(observed, chief_log=self.chief_log)
        return observed

    def reconcile(self) -> reconcile.Plan:
        """One reconcile: decide, then apply the plan as the API server would."""
        plan = reconcile.decide(self.observed())
        self.plans.append(plan)
        self.events.extend(plan.events)
        if plan.status is not None:
            json.dumps(crd.document_of(plan.status))  # it must be plain data
            self.resource["status"] = crd.document_of(plan.status)
        for name in plan.delete_jobs:
            self._delete_job(name)
        for name, patch in plan.patch_jobs:
            merge(self.jobs[name], patch)
        for obj in plan.create:
            obj = copy.deepcopy(obj)
            obj["metadata"]["uid"] = f"uid-{next(_uids)}"
            if obj["kind"] == "Job":
                assert obj["metadata"]["name"] not in self.jobs, "created over an existing Job"
                obj["status"] = {}
                self.jobs[obj["metadata"]["name"]] = obj
            else:
                self.others[(obj["kind"], obj["metadata"]["name"])] = obj
        if plan.delete_resource:
            self.deleted = True
        return plan

    def settle(self, limit: int = 10) -> reconcile.Plan:
        """Reconcile until nothing changes any more (what the watch events would cause)."""
        for _ in range(limit):
            plan = self.reconcile()
            if plan.status is None and not (plan.create or plan.delete_jobs or plan.patch_jobs):
                return plan
        raise AssertionError(f"no steady state after {limit} reconciles: {self.plans[-3:]}")

    def _delete_job(self, name: str) -> None:
        if name not in self.jobs:
            return
        if self.keep_terminating:
            self.jobs[name]["metadata"]["deletionTimestamp"] = format_time(self.now)
            return
        uid = self.jobs.pop(name)["metadata"]["uid"]
        for pod_name in [n for n, p in self.pods.items() if _owner_uid(p) == uid]:
            del self.pods[pod_name]

    def finish_deletions(self) -> None:
        self.keep_terminating = False
        for name in [n for n, j in self.jobs.items() if j["metadata"].get("deletionTimestamp")]:
            self._delete_job(name)

    # -- the Job controller's and the kubelet's side

    @property
    def status(self) -> crd.Status:
        return crd.status_from_document(self.resource.get("status"))

    def job(self, name: str | None = None) -> dict[str, Any]:
        return self.jobs[name] if name else next(iter(self.jobs.values()))

    def start_workers(self) -> None:
        """Every Job's pods run and are ready."""
        for job in self.jobs.values():
            if job["spec"].get("suspend"):
                continue
            for _, pod in _pods_of(job):
                pod["status"] = {
                    "phase": "Running",
                    "containerStatuses": [{"name": "trainer", "state": {"running": {}}}],
                }
                self.pods[pod["metadata"]["name"]] = pod
            job["status"] = {"active": _count(job), "ready": _count(job)}

    def fail_worker(
        self,
        index: int,
        exit_code: int = 1,
        message: str = "",
        finished_at: str | None = None,
        reason: str = "Error",
    ) -> None:
        """Worker `index` exits; its Job (backoffLimit 0) fails, as Kubernetes would."""
        pod = next(p for p in self.pods.values() if _index(p) == index)
        ended = {"exitCode": exit_code, "reason": reason, "message": message}
        if finished_at is not None:
            ended["finishedAt"] = finished_at
        pod["status"] = {
            "phase": "Failed",
            "containerStatuses": [{"name": "trainer", "state": {"terminated": ended}}],
        }
        job = next(j for j in self.jobs.values() if j["metadata"]["uid"] == _owner_uid(pod))
        reason = (
            "PodFailurePolicy"
            if exit_code == contract.EXIT_CONFIG_ERROR
            else "BackoffLimitExceeded"
        )
        job["status"] = {
            "failed": 1,
            "conditions": [{"type": "Failed", "status": "True", "reason": reason,
                            "message": "Job has reached the specified backoff limit"}],
        }  # fmt: skip

    def finish_worker(self, index: int) -> None:
        """Worker `index` alone exits 0 (its program ended; the others still run)."""
        pod = next(p for p in self.pods.values() if _index(p) == index)
        pod["status"] = {
            "phase": "Succeeded",
            "containerStatuses": [{"name": "trainer", "state": {"terminated": {
                "exitCode": 0, "reason": "Completed", "message": ""}}}],
        }  # fmt: skip
        job = next(j for j in self.jobs.values() if j["metadata"]["uid"] == _owner_uid(pod))
        if _count(job) == 1:
            job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
        else:
            job["status"] = {**job.get("status", {}), "succeeded": 1, "active": _count(job) - 1}

    def complete(self, termination_message: str = "") -> None:
        """Every worker exits 0; the chief may leave its result in its termination message."""
        for pod in self.pods.values():
            pod["status"] = {
                "phase": "Succeeded",
                "containerStatuses": [
                    {"name": "trainer", "state": {"terminated": {
                        "exitCode": 0, "reason": "Completed",
                        "message": termination_message if _index(pod) == 0 else "",
                    }}}
                ],
            }  # fmt: skip
        for job in self.jobs.values():
            job["status"] = {
                "succeeded": _count(job),
                "conditions": [{"type": "Complete", "status": "True"}],
            }

    def edit(self, **spec: Any) -> None:
        """`kubectl edit`: change the spec, bump the generation."""
        self.resource["spec"].update(spec)
        self.resource["metadata"]["generation"] += 1


def result_log(result: dict[str, Any] = RESULT) -> str:
    return "epoch 3/3 done\n" + contract.RESULT_LINE_PREFIX + json.dumps(result) + "\nbye\n"


def _count(job: dict[str, Any]) -> int:
    return int(job["spec"].get("completions") or 1)


def _pods_of(job: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    indexed = job["spec"].get("completionMode") == "Indexed"
    template = job["spec"]["template"]
    pods = []
    for i in range(_count(job)):
        pod_labels = dict(template["metadata"]["labels"])
        annotations = {}
        if indexed:
            annotations["batch.kubernetes.io/job-completion-index"] = str(i)
        index = i if indexed else int(pod_labels["tflaunch.dev/worker-index"])
        pods.append(
            (
                index,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{job['metadata']['name']}-{i}-{next(_uids)}",
                        "namespace": job["metadata"]["namespace"],
                        "uid": f"pod-{next(_uids)}",
                        "labels": pod_labels,
                        "annotations": annotations,
                        "ownerReferences": [
                            {"apiVersion": "batch/v1", "kind": "Job", "controller": True,
                             "name": job["metadata"]["name"], "uid": job["metadata"]["uid"]}
                        ],
                    },
                    "spec": copy.deepcopy(template["spec"]),
                },
            )
        )  # fmt: skip
    return pods


def _owner_uid(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["ownerReferences"][0]["uid"])


def _index(pod: dict[str, Any]) -> int | None:
    from launcher.core import labels

    meta = pod["metadata"]
    return labels.worker_index_of(meta.get("labels", {}), meta.get("annotations", {}))
