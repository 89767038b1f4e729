"""GPU workers: NCCL's connections between pods and its shared memory (issue 11, items 1-2)."""

from __future__ import annotations

import pytest

from launcher.core import render
from launcher.core.errors import SpecError
from launcher.core.load import load_job

EXAMPLE = "examples/mnist.yaml"
GPU = [
    ("spec.gpusPerWorker", 2),
    ("spec.trainer.globalBatchSize", 256),
    ("spec.image", "tflaunch-trainer:0.1.0"),
]  # its GPU build


def _objects(overrides):
    return {o["kind"]: o for o in render.render(load_job(EXAMPLE, overrides))}


def _pod_spec(overrides):
    return _objects(overrides)["Job"]["spec"]["template"]["spec"]


def test_gpu_workers_admit_all_tcp_between_the_jobs_own_workers():
    policy = _objects(GPU)["NetworkPolicy"]["spec"]
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"protocol": "TCP"}]  # every TCP port: NCCL picks its own
    (peer,) = rule["from"]
    assert peer == {"podSelector": {"matchLabels": policy["podSelector"]["matchLabels"]}}


def test_cpu_workers_keep_the_policy_on_the_grpc_and_control_ports():
    (rule,) = _objects([])["NetworkPolicy"]["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 2222}, {"protocol": "TCP", "port": 2223}]


def test_gpu_workers_get_a_memory_backed_dev_shm():
    pod = _pod_spec(GPU)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["dshm"] == "/dev/shm"


def test_the_shm_size_is_configurable():
    pod = _pod_spec([*GPU, ("spec.shmSize", "2Gi")])
    (dshm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert dshm["emptyDir"]["sizeLimit"] == "2Gi"


def test_cpu_workers_have_the_default_dev_shm():
    names = [v["name"] for v in _pod_spec([])["volumes"]]
    assert "dshm" not in names


@pytest.mark.parametrize(
    "overrides, field, hint",
    [
        ([("spec.shmSize", "lots")], "spec.shmSize", "quantity"),
        ([("spec.shmSize", "8Gi")], "spec.shmSize", "memory limit"),
        ([("spec.checkpoint.mountPath", "/dev/shm")], "spec.checkpoint.mountPath", "/dev/shm"),
    ],
)
def test_a_bad_shm_size_is_refused(overrides, field, hint):
    with pytest.raises(SpecError) as caught:
        load_job(EXAMPLE, [*GPU, *overrides])
    assert caught.value.field == field
    assert hint in str(caught.value)


def test_egress_to_the_cloud_metadata_address_can_be_denied():
    policy = _objects([("spec.denyMetadataEgress", True)])["NetworkPolicy"]["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = policy["egress"]
    blocks = [peer["ipBlock"] for peer in rule["to"]]
    assert {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]} in blocks
    assert {"cidr": "::/0"} in blocks


def test_egress_is_not_restricted_by_default():
    policy = _objects([])["NetworkPolicy"]["spec"]
    assert policy["policyTypes"] == ["Ingress"] and "egress" not in policy


def test_denying_metadata_egress_needs_the_network_policy():
    with pytest.raises(SpecError) as caught:
        load_job(EXAMPLE, [("spec.denyMetadataEgress", True), ("spec.networkPolicy", False)])
    assert caught.value.field == "spec.denyMetadataEgress"
    assert "needs spec.networkPolicy" in str(caught.value)


def test_a_gpu_job_with_the_cpu_build_of_the_image_is_refused_naming_the_gpu_build():
    """`--gpus 1` on the default spec kept `tflaunch-trainer:0.1.0-cpu` beside
    `nvidia.com/gpu: 1`, and `validate` said ok: the job would have trained on CPU."""
    load_job(EXAMPLE, [("spec.gpusPerWorker", 1)], local=True)  # a local run uses no image
    with pytest.raises(SpecError) as caught:
        load_job(EXAMPLE, [("spec.gpusPerWorker", 1)])
    assert caught.value.field == "spec.image"
    assert str(caught.value) == (
        "spec.image: tflaunch-trainer:0.1.0-cpu is a CPU image (its tag ends in -cpu) but "
        "spec.gpusPerWorker is 1: TensorFlow in it cannot use the GPUs; use the GPU build "
        "tflaunch-trainer:0.1.0 (`make image`, `--image tflaunch-trainer:0.1.0`) or --gpus 0"
    )


@pytest.mark.parametrize(
    "image", ["tflaunch-trainer:0.1.0", "registry:5000/trainer:2.21-gpu", "trainer@sha256:ab"]
)
def test_a_gpu_job_with_any_other_image_renders(image):
    assert _objects([*GPU[:2], ("spec.image", image)])["Job"]
