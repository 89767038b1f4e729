"""The checks behind `tflaunch doctor`: the usual causes of MultiWorkerMirroredStrategy
failures, looked for in the live objects (given as plain dicts).

Pure, so each check is a function from objects to a `Check`, testable with dicts. The causes:
no GPUs where the job needs them (device plugin missing, too few), a ResourceQuota without
room for all workers (MWMS needs every worker at once), a headless Service that does not
publish not-ready peers or misses workers (their DNS names do not resolve), and pods whose
TF_CONFIGs disagree (the cluster list, the indices, or the host names).
"""

from __future__ import annotations

import dataclasses
import decimal
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from launcher.core import contract, labels, reading, tfconfig
from launcher.core.quantities import quantity

Obj = Mapping[str, Any]
GPU = "nvidia.com/gpu"


@dataclasses.dataclass(frozen=True)
class Check:
    """One line of the checklist."""

    name: str
    outcome: Literal["ok", "fail", "skip"]
    detail: str
    fix: str | None = None
    """What to do, when it failed."""

    @property
    def failed(self) -> bool:
        return self.outcome == "fail"


def ok(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


def fail(name: str, detail: str, fix: str) -> Check:
    return Check(name, "fail", detail, fix)


def skip(name: str, detail: str) -> Check:
    return Check(name, "skip", detail)


@dataclasses.dataclass(frozen=True)
class Needs:
    """What a job asks the cluster for: its workers and each worker's resources."""

    workers: int
    requests: Mapping[str, decimal.Decimal]
    limits: Mapping[str, decimal.Decimal]

    @property
    def gpus_per_worker(self) -> int:
        return int(self.limits.get(GPU) or self.requests.get(GPU) or 0)


# --- Quantities ----------------------------------------------------------------------------


def _number(value: decimal.Decimal) -> str:
    return f"{value.normalize():f}"


# --- What the job needs --------------------------------------------------------------------


def needs_of(jobs: Sequence[Obj]) -> Needs | None:
    """Workers and per-worker resources from a job's Kubernetes Jobs (rendered or live)."""
    if not jobs:
        return None
    workers = 0
    for job in jobs:
        spec = job.get("spec") or {}
        workers += int(spec.get("completions") or 1)
    resources = _trainer(jobs[0]).get("resources") or {}
    limits = {k: quantity(v) for k, v in (resources.get("limits") or {}).items()}
    requests = {k: quantity(v) for k, v in (resources.get("requests") or {}).items()}
    for key, value in limits.items():  # the API server defaults requests to limits
        requests.setdefault(key, value)
    return Needs(workers, requests, limits)


def _pod_spec(job: Obj) -> Obj:
    return reading.spec(reading.pod_template(job))


def _trainer(job_or_pod: Obj) -> Obj:
    spec = _pod_spec(job_or_pod) if job_or_pod.get("kind") == "Job" else job_or_pod.get("spec")
    containers = (spec or {}).get("containers") or [{}]
    return next((c for c in containers if c.get("name") == "trainer"), containers[0])


# --- Checks --------------------------------------------------------------------------------


def check_gpu_nodes(nodes: Sequence[Obj], needs: Needs | None) -> Check:
    """Nodes with allocatable nvidia.com/gpu, and room for every worker's GPUs."""
    name = "GPU nodes"
    allocatable = [
        (node["metadata"]["name"], int(quantity(_allocatable(node).get(GPU, 0))))
        for node in nodes
        if not (node.get("spec") or {}).get("unschedulable")
    ]
    with_gpus = [(n, g) for n, g in allocatable if g > 0]
    total = sum(g for _, g in with_gpus)
    found = f"{len(with_gpus)} of {len(nodes)} nodes have allocatable {GPU} ({total} in total)"
    if needs is None or needs.gpus_per_worker == 0:
        job = "" if needs is None else "; this job runs on CPUs"
        return ok(name, found + job) if with_gpus or needs else skip(name, found + job)
    gpus = needs.gpus_per_worker
    if not with_gpus:
        return fail(
            name,
            f"no node has allocatable {GPU}, but each of the {needs.workers} workers needs {gpus}",
            "install the NVIDIA device plugin (or the NVIDIA GPU operator) on the GPU nodes, "
            "then check: kubectl get nodes -o custom-columns=NAME:.metadata.name,"
            "GPUS:.status.allocatable.nvidia\\.com/gpu",
        )
    slots = sum(g // gpus for _, g in with_gpus)
    if slots < needs.workers:
        return fail(
            name,
            f"{found}: room for {slots} workers of {gpus} GPUs, but the job has {needs.workers}; "
            "MWMS cannot start until all of them are scheduled",
            "ask for fewer workers or GPUs per worker (--workers, --gpus), or add GPU nodes",
        )
    return ok(name, f"{found}: room for {slots} workers of {gpus} GPUs (the job has "
              f"{needs.workers}; GPUs in use by other pods not counted)")  # fmt: skip


FIT_RESOURCES = (("cpu", "spec.resources.requests.cpu"),
                 ("memory", "spec.resources.requests.memory"),
                 (GPU, "spec.gpusPerWorker"))  # fmt: skip
"""What a worker asks of its node, and the spec field that asks it."""


def check_fit(nodes: Sequence[Obj], needs: Needs | None, node_selector: Mapping[str, str]) -> Check:
    """Whether one worker fits on some node at all: its requests against the allocatable of
    each schedulable node its nodeSelector matches (what other pods use is not counted:
    this finds the request no node can ever hold, not a busy cluster)."""
    name = "node fit"
    if needs is None:
        return skip(name, "no job")
    candidates = [
        n for n in nodes
        if not reading.spec(n).get("unschedulable")
        and all(reading.labels_of(n).get(k) == v for k, v in node_selector.items())
    ]  # fmt: skip
    where = f"nodes matching nodeSelector {dict(node_selector)}" if node_selector else "nodes"
    if not candidates:  # none yet: an autoscaler may bring them (from zero), say nothing
        return skip(name, f"no schedulable {where} to compare with")
    for key, field in FIT_RESOURCES:
        want = needs.requests.get(key)
        if not want:
            continue
        largest, node = max(
            (quantity(_allocatable(n).get(key, 0)), reading.name(n)) for n in candidates
        )
        if want > largest:
            return fail(
                name,
                f"each worker requests {key} {_number(want)}, more than any of the "
                f"{len(candidates)} {where} can give (the most: {_number(largest)} on {node})",
                f"lower {field} to at most {_number(largest)}, or add a larger node",
            )
    return ok(name, f"one worker fits on {len(candidates)} {where}")


def _allocatable(node: Obj) -> Mapping[str, Any]:
    return (node.get("status") or {}).get("allocatable") or {}


_QUOTA_KEYS = {
    "requests.cpu": ("requests", "cpu"),
    "cpu": ("requests", "cpu"),
    "requests.memory": ("requests", "memory"),
    "memory": ("requests", "memory"),
    "limits.cpu": ("limits", "cpu"),
    "limits.memory": ("limits", "memory"),
    f"requests.{GPU}": ("requests", GPU),
    f"limits.{GPU}": ("limits", GPU),
}


def check_quota(quotas: Sequence[Obj], needs: Needs | None, admitted: bool) -> Check:
    """Whether every ResourceQuota of the namespace has room for all the workers at once."""
    name = "ResourceQuota"
    if not quotas:
        return ok(name, "no ResourceQuota in the namespace")
    if needs is None:
        return skip(name, f"{len(quotas)} quota(s); name a job to check its room")
    if admitted:
        return ok(name, "the job's pods exist: the quota admitted them")
    short = []
    for quota in quotas:
        hard = (
            (quota.get("status") or {}).get("hard") or (quota.get("spec") or {}).get("hard") or {}
        )
        used = (quota.get("status") or {}).get("used") or {}
        for key, limit in hard.items():
            need = _quota_need(key, needs)
            if need is None:
                continue
            room = quantity(limit) - quantity(used.get(key, 0))
            if need > room:
                short.append(
                    f"{quota['metadata']['name']}: {key} needs {_number(need)}, room "
                    f"{_number(room)} (hard {limit}, used {used.get(key, 0)})"
                )
    if short:
        return fail(
            name,
            "; ".join(short),
            "ask for more quota in the namespace, or fewer workers or resources per worker",
        )
    return ok(name, f"room for all {needs.workers} workers in {len(quotas)} quota(s)")


def _quota_need(key: str, needs: Needs) -> decimal.Decimal | None:
    if key == "pods":
        return decimal.Decimal(needs.workers)
    if key == "count/jobs.batch":
        return decimal.Decimal(1)
    if key not in _QUOTA_KEYS:
        return None
    kind, resource = _QUOTA_KEYS[key]
    per_worker = (needs.requests if kind == "requests" else needs.limits).get(resource)
    return None if per_worker is None else per_worker * needs.workers


def check_service(services: Sequence[Obj], service_name: str) -> Check:
    """The headless Service exists and publishes not-ready addresses."""
    name = "Headless Service"
    service = next((s for s in services if s["metadata"]["name"] == service_name), None)
    if service is None:
        return fail(
            name,
            f"Service {service_name} does not exist: no worker's DNS name resolves",
            "submit the job again (tflaunch submit SPEC) to recreate it",
        )
    spec = service.get("spec") or {}
    if spec.get("clusterIP") != "None":
        return fail(
            name,
            f"Service {service_name} is not headless (clusterIP {spec.get('clusterIP')})",
            "delete the job and submit it again (tflaunch submit SPEC --replace)",
        )
    if not spec.get("publishNotReadyAddresses"):
        return fail(
            name,
            f"Service {service_name} does not publish not-ready addresses: workers cannot "
            "resolve each other before they are Ready, so the MWMS rendezvous races DNS",
            f"kubectl patch service {service_name} -p "
            '\'{"spec":{"publishNotReadyAddresses":true}}\', or submit again with --replace',
        )
    return ok(name, f"Service {service_name} is headless and publishes not-ready addresses")


def check_endpoints(slices: Sequence[Obj], pods: Sequence[Obj], service_name: str) -> Check:
    """Every live worker pod is in the Service's EndpointSlices under its hostname."""
    name = "Service endpoints"
    live = [p for p in current_pods(pods) if reading.status(p).get("podIP")]
    if not live:
        return skip(name, "no worker pod has an IP yet")
    published = {
        (endpoint.get("hostname"), address)
        for s in slices
        for endpoint in s.get("endpoints") or []
        for address in endpoint.get("addresses") or []
    }
    missing = []
    for pod in live:
        hostname = pod_hostname(pod)
        if (hostname, pod["status"]["podIP"]) not in published:
            missing.append(f"worker {reading.pod_index(pod)} ({hostname})")
    if missing:
        return fail(
            name,
            f"{', '.join(missing)} missing from Service {service_name}'s EndpointSlices: "
            "their DNS names do not resolve",
            "check that the pods' labels match the Service's selector "
            f"({labels.JOB_NAME}, {labels.COMPONENT}=worker) and their subdomain is "
            f"{service_name} (kubectl get endpointslices -l "
            f"kubernetes.io/service-name={service_name} -o yaml)",
        )
    return ok(name, f"all {len(live)} live workers are published under their hostnames")


# --- TF_CONFIG -----------------------------------------------------------------------------


def current_pods(pods: Iterable[Obj]) -> list[Obj]:
    """The newest live pod of each worker index."""
    newest: dict[int, Obj] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
        index = reading.pod_index(pod)
        phase = reading.phase(pod)
        if index is None or pod["metadata"].get("deletionTimestamp"):
            continue
        if phase in ("Succeeded", "Failed"):
            continue
        newest[index] = pod
    return [newest[i] for i in sorted(newest)]


def pod_hostname(pod: Obj) -> str:
    """The pod's hostname: spec.hostname (the Job controller sets `<job>-<index>` for Indexed
    Jobs; the per-worker layout sets it itself), else the pod's name."""
    return str(reading.spec(pod).get("hostname") or pod["metadata"]["name"])


def pod_tf_config(pod: Obj) -> tuple[dict[str, Any] | None, str | None]:
    """The TF_CONFIG the pod's trainer got, `$(WORKER_INDEX)` expanded as the kubelet does;
    or (None, what is wrong)."""
    env = {e.get("name"): e for e in _trainer(pod).get("env") or []}
    if contract.ENV_TF_CONFIG not in env:
        return None, "has no TF_CONFIG"
    value = str(env[contract.ENV_TF_CONFIG].get("value") or "")
    index_var = env.get(contract.ENV_WORKER_INDEX)
    if index_var is not None:
        index = index_var.get("value")
        field = ((index_var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        if index is None and labels.COMPLETION_INDEX in field:
            index = reading.annotations_of(pod).get(labels.COMPLETION_INDEX)
        if index is not None:
            value = value.replace(f"$({contract.ENV_WORKER_INDEX})", str(index))
    try:
        parsed = json.loads(value)
    except ValueError:
        return None, f"has a TF_CONFIG that is not JSON: {value[:80]!r}"
    if not isinstance(parsed, dict):
        return None, "has a TF_CONFIG that is not a JSON object"
    return parsed, None


def check_tf_config(pods: Sequence[Obj], expected: int | None = None) -> Check:
    """The TF_CONFIG every live pod got: one cluster list everywhere, each index exactly once,
    and each host the real FQDN of the pod with that index."""
    name = "TF_CONFIG"
    live = current_pods(pods)
    if not live:
        return skip(name, "no live worker pods to read it from")
    problems: list[str] = []
    clusters: dict[str, list[int]] = {}
    tasks: dict[str, list[int]] = {}
    by_index: dict[int, Obj] = {}
    for pod in live:
        index = reading.pod_index(pod)
        assert index is not None  # current_pods keeps indexed pods only
        by_index[index] = pod
        config, error = pod_tf_config(pod)
        if config is None:
            problems.append(f"worker {index} {error}")
            continue
        task = config.get("task") or {}
        cluster = config.get("cluster")
        expected_task = _expected_task(cluster, index)
        if expected_task is not None and task.get("type") != expected_task["type"]:
            problems.append(
                f"worker {index} has task type {task.get('type')!r}, not {expected_task['type']!r}"
            )
        if expected_task is not None and task.get("index") != expected_task["index"]:
            problems.append(f"worker {index}'s TF_CONFIG says task index {task.get('index')}")
        if isinstance(task.get("index"), int):
            tasks.setdefault(f"{task.get('type')} {task['index']}", []).append(index)
        clusters.setdefault(json.dumps(config.get("cluster"), sort_keys=True), []).append(index)
    for claimed, holders in sorted(tasks.items()):
        if len(holders) > 1:
            problems.append(f"task {claimed} is claimed by workers {holders}")
    if len(clusters) > 1:
        variants = "; ".join(f"workers {v}" for v in clusters.values())
        problems.append(f"the cluster list differs between pods ({variants})")
    if clusters:
        cluster = json.loads(next(iter(clusters)))
        problems += _check_hosts(cluster, by_index, expected)
    if problems:
        return fail(
            name,
            "; ".join(problems),
            "the pods were made from different specs (a changed or partly re-applied job); "
            "recreate them all from one spec: tflaunch submit SPEC --replace",
        )
    return ok(name, f"consistent across {len(live)} live workers (one cluster list, each "
              "index once, hosts match the pods' DNS names)")  # fmt: skip


def _expected_task(cluster: Any, index: int) -> dict[str, Any] | None:
    """The task worker `index` must have in `cluster` (a chief first: `tfconfig.task`)."""
    if not isinstance(cluster, dict) or not all(
        isinstance(cluster.get(j, []), list) for j in contract.TF_CONFIG_GROUP_JOBS
    ):
        return {"type": "worker", "index": index}
    try:
        return tfconfig.task(cluster, index)
    except ValueError:  # outside the cluster: _check_hosts says so
        return None


def _check_hosts(cluster: Any, by_index: Mapping[int, Obj], expected: int | None) -> list[str]:
    workers = (
        tfconfig.group_addresses(cluster)
        if isinstance(cluster, dict) and isinstance(cluster.get("worker", []), list)
        else None
    )
    if not workers:
        return ["the cluster has no worker list"]
    problems = []
    if expected is not None and len(workers) != expected:
        problems.append(f"the cluster lists {len(workers)} workers, the job has {expected}")
    for index, pod in sorted(by_index.items()):
        if index >= len(workers):
            problems.append(f"worker {index} is not in the cluster list ({len(workers)} hosts)")
            continue
        host, _, port = str(workers[index]).rpartition(":")
        meta, spec = pod["metadata"], pod.get("spec") or {}
        prefix = f"{pod_hostname(pod)}.{spec.get('subdomain')}.{meta.get('namespace')}.svc."
        if not host.startswith(prefix):
            problems.append(
                f"worker {index}'s host is {host}, but the pod's DNS name is {prefix}<domain>"
            )
        ports = [str(p.get("containerPort")) for p in _trainer(pod).get("ports") or []]
        if ports and port not in ports:
            problems.append(f"worker {index}'s port is {port}, the pod listens on {ports[0]}")
    return problems
