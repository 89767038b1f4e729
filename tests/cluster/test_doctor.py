"""`tflaunch doctor`: the causes of MWMS failures, checked on the live objects."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from launcher.cluster import apply, doctor
from launcher.cluster.client import Cluster
from tests.cluster.conftest import Result, job_objects
from tests.cluster.fakeapi import FakeKubernetes
from tests.cluster.objects import gpu_node, pod_for

Tflaunch = Callable[..., Result]


def live_pods(job: dict[str, Any], workers: int = 2) -> list[dict[str, Any]]:
    return [pod_for(job, i, ip=f"10.0.0.{i + 10}") for i in range(workers)]


def slice_for(pods: list[dict[str, Any]], service: str = "mnist") -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service}-abcde",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": [p["status"]["podIP"]], "hostname": p["spec"]["hostname"]} for p in pods
        ],
    }


def set_tf_config(pod: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """`pod` with its TF_CONFIG edited (after expanding its index, as the kubelet would)."""
    pod = copy.deepcopy(pod)
    (env,) = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "TF_CONFIG"]
    config, _ = doctor.pod_tf_config(pod)
    assert config is not None
    edit(config)
    env["value"] = json.dumps(config)
    return pod


@pytest.fixture
def job(cluster: Cluster, fake: FakeKubernetes) -> dict[str, Any]:
    apply.apply_job(cluster, job_objects(spec__gpusPerWorker=1))
    stored = fake.get("Job", "mnist-worker")
    assert stored is not None
    return stored


# --- The checks, from dicts ----------------------------------------------------------------


def test_the_tf_config_each_pod_got_is_read_with_its_index_expanded() -> None:
    job = job_objects()[-1]

    config, error = doctor.pod_tf_config(pod_for(job, 1))

    assert error is None
    assert config == {
        "cluster": {
            "worker": [
                "mnist-worker-0.mnist.default.svc.cluster.local:2222",
                "mnist-worker-1.mnist.default.svc.cluster.local:2222",
            ]
        },
        "task": {"type": "worker", "index": 1},
    }


def test_consistent_tf_configs_pass() -> None:
    job = job_objects()[-1]

    check = doctor.check_tf_config(live_pods(job), expected=2)

    assert check.outcome == "ok"


def test_a_chiefs_tf_configs_pass_and_a_chief_named_worker_does_not() -> None:
    """A TFJob's Chief is worker 0 with task chief 0; the workers after it are worker i-1."""
    rendered = job_objects(
        spec__layout="per-worker", spec__tfConfig__chief="chief", spec__workers=4,
        spec__command=["python", "/train.py"],
    )  # fmt: skip
    jobs = [o for o in rendered if o["kind"] == "Job"]
    pods = [pod_for(job, 0, ip=f"10.0.0.{i + 10}") for i, job in enumerate(jobs)]

    assert doctor.check_tf_config(pods, expected=4).outcome == "ok"

    pods[0] = set_tf_config(pods[0], lambda c: c["task"].update(type="worker"))
    check = doctor.check_tf_config(pods, expected=4)
    assert check.failed and "worker 0 has task type 'worker', not 'chief'" in check.detail


def test_a_pod_with_another_cluster_list_is_inconsistent() -> None:
    job = job_objects()[-1]
    pods = live_pods(job)
    pods[1] = set_tf_config(pods[1], lambda c: c["cluster"]["worker"].append("extra:2222"))

    check = doctor.check_tf_config(pods, expected=2)

    assert check.failed
    assert "the cluster list differs between pods (workers [0]; workers [1])" in check.detail
    assert "tflaunch submit SPEC --replace" in (check.fix or "")


def test_two_pods_claiming_one_index_are_inconsistent() -> None:
    job = job_objects()[-1]
    pods = live_pods(job)
    pods[1] = set_tf_config(pods[1], lambda c: c["task"].update(index=0))

    check = doctor.check_tf_config(pods)

    assert "worker 1's TF_CONFIG says task index 0" in check.detail
    assert "task worker 0 is claimed by workers [0, 1]" in check.detail


def test_a_host_that_is_not_the_pods_dns_name_is_inconsistent() -> None:
    job = job_objects()[-1]
    pods = live_pods(job)
    pods[0]["spec"]["hostname"] = "renamed-0"

    check = doctor.check_tf_config(pods)

    assert check.failed
    assert (
        "worker 0's host is mnist-worker-0.mnist.default.svc.cluster.local, but the pod's DNS "
        "name is renamed-0.mnist.default.svc.<domain>"
    ) in check.detail


def test_per_worker_pods_carry_their_literal_index() -> None:
    jobs = [o for o in job_objects(spec__layout="per-worker") if o["kind"] == "Job"]
    pods = [pod_for(jobs[i], i) for i in range(2)]

    assert doctor.check_tf_config(pods, expected=2).outcome == "ok"


def test_no_gpu_nodes_fail_a_gpu_job_and_point_at_the_device_plugin() -> None:
    needs = doctor.needs_of([job_objects(spec__gpusPerWorker=1)[-1]])

    check = doctor.check_gpu_nodes([gpu_node("cpu-1"), gpu_node("cpu-2")], needs)

    assert check.failed
    assert check.detail == (
        "no node has allocatable nvidia.com/gpu, but each of the 2 workers needs 1"
    )
    assert "NVIDIA device plugin" in (check.fix or "")


def test_too_few_gpus_for_all_workers_fail() -> None:
    needs = doctor.needs_of([job_objects(spec__gpusPerWorker=2, spec__workers=4)[-1]])

    check = doctor.check_gpu_nodes([gpu_node("a", 4), gpu_node("b", 3)], needs)

    assert check.failed
    assert "room for 3 workers of 2 GPUs, but the job has 4" in check.detail


def test_a_cpu_job_needs_no_gpus() -> None:
    needs = doctor.needs_of([job_objects()[-1]])

    assert doctor.check_gpu_nodes([gpu_node("cpu")], needs).outcome in ("ok", "skip")


def test_a_quota_without_room_for_every_worker_fails() -> None:
    needs = doctor.needs_of([job_objects(spec__gpusPerWorker=1, spec__workers=4)[-1]])
    quota = {
        "metadata": {"name": "team"},
        "status": {
            "hard": {"requests.nvidia.com/gpu": "4", "requests.memory": "64Gi"},
            "used": {"requests.nvidia.com/gpu": "2", "requests.memory": "8Gi"},
        },
    }

    check = doctor.check_quota([quota], needs, admitted=False)

    assert check.failed
    assert check.detail == ("team: requests.nvidia.com/gpu needs 4, room 2 (hard 4, used 2)")


def test_a_service_without_publish_not_ready_addresses_fails() -> None:
    service = copy.deepcopy(job_objects()[0])
    service["spec"]["publishNotReadyAddresses"] = False

    check = doctor.check_service([service], "mnist")

    assert check.failed
    assert "races DNS" in check.detail


# --- The command, against the API ----------------------------------------------------------


def test_doctor_passes_a_healthy_gpu_job(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(gpu_node("gpu-a", 1))
    fake.put(gpu_node("gpu-b", 1))
    pods = live_pods(job)
    for pod in pods:
        fake.put(pod)
    fake.put(slice_for(pods))

    result = tflaunch("doctor", "mnist")

    assert result.code == 0, result.out
    marks = [line.split(" ", 1)[0] for line in result.out.splitlines()]
    assert set(marks) == {"✓"}
    assert [line.split(":")[0][2:] for line in result.out.splitlines()] == [
        "API server",
        "GPU nodes",
        "ResourceQuota",
        "Headless Service",
        "Service endpoints",
        "TF_CONFIG",
    ]


def test_doctor_fails_without_gpu_nodes_and_prints_the_fix(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(gpu_node("cpu-only"))

    result = tflaunch("doctor", "mnist")

    assert result.code == 1
    lines = result.out.splitlines()
    (failed,) = [i for i, line in enumerate(lines) if line.startswith("✗")]
    assert lines[failed].startswith("✗ GPU nodes: no node has allocatable nvidia.com/gpu")
    assert lines[failed + 1].startswith("    fix: install the NVIDIA device plugin")
    assert result.err == "1 of 6 checks failed\n"


def test_doctor_finds_inconsistent_tf_configs_and_missing_endpoints(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(gpu_node("gpu-a", 2))
    pods = live_pods(job)
    fake.put(pods[0])
    fake.put(set_tf_config(pods[1], lambda c: c["cluster"]["worker"].reverse()))
    fake.put(slice_for(pods[:1]))

    result = tflaunch("doctor", "mnist")

    assert result.code == 1
    failed = [line for line in result.out.splitlines() if line.startswith("✗")]
    assert failed[0].startswith("✗ Service endpoints: worker 1 (mnist-worker-1) missing")
    assert failed[1].startswith("✗ TF_CONFIG: ")
    assert "the cluster list differs between pods" in failed[1]


def test_doctor_checks_a_spec_before_it_is_submitted(
    tflaunch: Tflaunch, fake: FakeKubernetes, tmp_path: Any
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "apiVersion: tflaunch.dev/v1alpha1\nkind: MultiWorkerJob\nmetadata: {name: big}\n"
        "spec: {image: trainer:1, workers: 4, gpusPerWorker: 2, "
        "trainer: {globalBatchSize: 256}}\n"
    )
    fake.put(gpu_node("gpu-a", 4))

    result = tflaunch("doctor", "-f", str(spec))

    assert result.code == 1
    assert "room for 2 workers of 2 GPUs, but the job has 4" in result.out


def test_doctor_of_a_missing_job_fails_that_check(tflaunch: Tflaunch) -> None:
    result = tflaunch("doctor", "ghost")

    assert result.code == 1
    assert "✗ Job: job ghost not found in namespace default" in result.out


def test_doctor_skips_what_rbac_forbids_reading(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.fail(
        "GET", r"/api/v1/nodes$", 403, 'User "alice" cannot list resource "nodes" in API group ""'
    )

    result = tflaunch("doctor", "mnist")

    assert "- GPU nodes: not checked: cannot list nodes: forbidden" in result.out


# --- Will one worker fit on any node? (`submit` warns before it applies) -------------------


def _node(name: str, cpu: str, memory: str = "32Gi", **node_labels: str) -> dict[str, Any]:
    node = gpu_node(name)
    node["status"]["allocatable"] = {"cpu": cpu, "memory": memory}
    node["metadata"]["labels"] = node_labels
    return node


def test_a_worker_requesting_more_cpu_than_any_node_has_fails_naming_the_field() -> None:
    needs = doctor.needs_of(
        [job_objects(spec__resources__requests__cpu="4", spec__resources__limits__cpu="4")[-1]]
    )
    check = doctor.check_fit([_node("small", "2"), _node("smaller", "1500m")], needs, {})
    assert check.failed
    assert check.detail == (
        "each worker requests cpu 4, more than any of the 2 nodes can give (the most: 2 on small)"
    )
    assert check.fix == "lower spec.resources.requests.cpu to at most 2, or add a larger node"


def test_only_the_nodes_the_selector_matches_count() -> None:
    needs = doctor.needs_of(
        [job_objects(spec__resources__requests__cpu="4", spec__resources__limits__cpu="4")[-1]]
    )
    nodes = [_node("big", "16"), _node("pool-a", "2", pool="a")]
    assert not doctor.check_fit(nodes, needs, {}).failed
    check = doctor.check_fit(nodes, needs, {"pool": "a"})
    assert check.failed and "nodes matching nodeSelector {'pool': 'a'}" in check.detail
    none = doctor.check_fit(nodes, needs, {"pool": "b"})  # an autoscaler may bring them
    assert none.outcome == "skip" and none.detail == (
        "no schedulable nodes matching nodeSelector {'pool': 'b'} to compare with"
    )


def test_submit_warns_before_it_applies_a_job_no_node_can_hold_and_applies_it(
    tflaunch: Tflaunch, fake: FakeKubernetes
) -> None:
    """The project's 2-core real node, with a spec asking 4 CPUs per worker, stayed Pending
    for 15 minutes. A warning, not a refusal: an autoscaler may add a node that fits."""
    fake.put(_node("real-node", "2", "8Gi"))

    result = tflaunch(
        "submit", "--set", "spec.resources.requests.cpu=4", "--set", "spec.resources.limits.cpu=4"
    )

    assert result.code == 0, result.err
    assert (
        "tflaunch: warning: each worker requests cpu 4, more than any of the 1 nodes can give "
        "(the most: 2 on real-node): the workers would stay Pending; lower "
        "spec.resources.requests.cpu to at most 2, or add a larger node"
    ) in result.err
    assert "job.batch/mnist-worker created" in result.out


def test_submit_says_nothing_when_a_worker_fits(tflaunch: Tflaunch, fake: FakeKubernetes) -> None:
    fake.put(_node("real-node", "2", "8Gi"))
    result = tflaunch("submit")
    assert result.code == 0 and "warning" not in result.err, result.err
