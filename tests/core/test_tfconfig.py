"""Every pod, in both layouts, gets a TF_CONFIG consistent with every other pod's."""

from __future__ import annotations

import json

import pytest

from launcher.core import tfconfig
from launcher.core.load import load_job
from launcher.core.render import render
from tests.core.k8s_emulation import container_env, pod_fqdn, pods_of_job


def _pods(objects: list[dict]) -> list[dict]:
    return [pod for obj in objects if obj["kind"] == "Job" for pod in pods_of_job(obj)]


@pytest.mark.parametrize("layout", ["indexed", "per-worker"])
@pytest.mark.parametrize("workers", [1, 2, 5])
@pytest.mark.parametrize(
    "namespace, domain, port",
    [("default", "cluster.local", 2222), ("ml-team", "corp.example", 40000)],
)
def test_every_pod_sees_the_same_cluster_and_its_own_index(
    layout, workers, namespace, domain, port
):
    job = load_job(
        None,
        [
            ("spec.layout", layout),
            ("spec.workers", workers),
            ("metadata.namespace", namespace),
            ("spec.clusterDomain", domain),
            ("spec.port", port),
            ("spec.trainer.globalBatchSize", 60),
        ],
    )
    objects = render(job)
    (service,) = [o for o in objects if o["kind"] == "Service"]
    pods = _pods(objects)
    assert len(pods) == workers

    configs = [json.loads(container_env(pod)["TF_CONFIG"]) for pod in pods]
    clusters = {json.dumps(c["cluster"], sort_keys=True) for c in configs}
    assert len(clusters) == 1, "every worker must get the same cluster list"
    assert sorted(c["task"]["index"] for c in configs) == list(range(workers))
    assert all(c["task"]["type"] == "worker" for c in configs)
    assert all(isinstance(c["task"]["index"], int) for c in configs)

    worker_list = configs[0]["cluster"]["worker"]
    for pod, config in zip(pods, configs, strict=True):
        index = config["task"]["index"]
        assert container_env(pod)["WORKER_INDEX"] == str(index)
        host, _, host_port = worker_list[index].rpartition(":")
        assert host == pod_fqdn(pod, domain), "TF_CONFIG must name the pod's real DNS name"
        assert pod["spec"]["subdomain"] == service["metadata"]["name"]
        (container,) = pod["spec"]["containers"]
        container_port = container["ports"][0]  # then the wrappers' control port
        service_port = service["spec"]["ports"][0]
        assert int(host_port) == container_port["containerPort"] == service_port["port"] == port
        assert service_port["targetPort"] == container_port["name"]
        assert pod["metadata"]["labels"].items() >= service["spec"]["selector"].items()


def test_indexed_manifest_stays_the_same_size_whatever_the_index():
    """The index comes from Kubernetes, so the Job holds one pod template, not N."""
    small = render(load_job(None, [("spec.workers", 2)]))
    large = render(load_job(None, [("spec.workers", 64)]))
    assert [o["kind"] for o in small] == [o["kind"] for o in large]


def test_worker_index_is_declared_before_tf_config_that_uses_it():
    (job,) = [o for o in render(load_job(None)) if o["kind"] == "Job"]
    names = [e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert names.index("WORKER_INDEX") < names.index("TF_CONFIG")


def test_tf_config_placeholder_is_a_bare_number_once_expanded():
    text = tfconfig.tf_config_json(tfconfig.cluster_spec(["a:1", "b:1"]), None)
    assert '"index":$(WORKER_INDEX)}' in text
    assert json.loads(text.replace("$(WORKER_INDEX)", "1"))["task"]["index"] == 1


def test_tf_config_rejects_an_index_outside_the_cluster():
    with pytest.raises(ValueError):
        tfconfig.tf_config(tfconfig.cluster_spec(["a:1"]), 1)


def test_tfconfig_command_prints_exactly_what_the_pod_receives(capsys):
    from launcher.cli.main import run

    assert run(["tfconfig", "--workers", "3", "--global-batch-size", "192", "--index", "2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    job = load_job(None, [("spec.workers", 3), ("spec.trainer.globalBatchSize", 192)])
    (job_object,) = [o for o in render(job) if o["kind"] == "Job"]
    pod = pods_of_job(job_object)[2]
    assert printed == json.loads(container_env(pod)["TF_CONFIG"])


def test_tfconfig_command_rejects_an_index_outside_the_workers(capsys):
    from launcher.cli.main import run

    assert run(["tfconfig", "--index", "2"]) == 2
    err = capsys.readouterr().err
    assert "--index" in err and len(err.strip().splitlines()) == 1
