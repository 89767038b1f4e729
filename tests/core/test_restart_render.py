"""spec.restart: what inPlace adds to the rendered objects, and that recreate adds nothing."""

from __future__ import annotations

import pytest

from launcher.core import contract
from launcher.core.load import load_job
from launcher.core.render import render
from tests.core.k8s_emulation import JOB_UID, container_env, pods_of_job
from trainer import run


def _objects(*overrides: tuple[str, object]) -> dict[str, list[dict]]:
    by_kind: dict[str, list[dict]] = {}
    for obj in render(load_job("examples/mnist.yaml", list(overrides))):
        by_kind.setdefault(obj["kind"], []).append(obj)
    return by_kind


def _container(job: dict) -> dict:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("layout", ["indexed", "per-worker"])
def test_in_place_gives_every_wrapper_its_budget_and_a_control_port(layout: str) -> None:
    objects = _objects(
        ("spec.restart", "inPlace"), ("spec.backoffLimit", 5), ("spec.layout", layout)
    )
    for job in objects["Job"]:
        container = _container(job)
        wrapper_flags = run.parse_args(container["args"], {})
        assert wrapper_flags.restart_in_place == 5
        assert {"name": "tflaunch-ctl", "containerPort": 2223, "protocol": "TCP"} in container[
            "ports"
        ]
    (service,) = objects["Service"]
    assert {
        "name": "tflaunch-ctl",
        "port": 2223,
        "targetPort": "tflaunch-ctl",
        "protocol": "TCP",
    } in (service["spec"]["ports"])
    (policy,) = objects["NetworkPolicy"]
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["ports"] == [
        {"protocol": "TCP", "port": 2222},
        {"protocol": "TCP", "port": 2223},
    ]


def test_the_control_port_follows_spec_port() -> None:
    objects = _objects(("spec.restart", "inPlace"), ("spec.port", 3000))
    (job,) = objects["Job"]
    assert [p["containerPort"] for p in _container(job)["ports"]] == [3000, 3001]


def test_recreate_is_the_default_and_renders_no_control_port() -> None:
    objects = _objects()
    (job,) = objects["Job"]
    container = _container(job)
    assert run.parse_args(container["args"], {}).restart_in_place is None
    assert [p["name"] for p in container["ports"]] == ["tf-grpc"]
    (service,) = objects["Service"]
    assert [p["name"] for p in service["spec"]["ports"]] == ["tf-grpc"]
    (policy,) = objects["NetworkPolicy"]
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 2222}]


@pytest.mark.parametrize("layout", ["indexed", "per-worker"])
def test_in_place_gives_every_wrapper_its_jobs_uid(layout: str) -> None:
    """The key of the generation a plain Job's recreated pods continue (trainer.generation_file):
    the Job's uid, from the label the API server sets on its pods."""
    objects = _objects(("spec.restart", "inPlace"), ("spec.layout", layout))
    for job in objects["Job"]:
        for pod in pods_of_job(job):
            assert container_env(pod)[contract.ENV_JOB_UID] == JOB_UID


def test_recreate_renders_no_job_uid() -> None:
    (job,) = _objects()["Job"]
    assert contract.ENV_JOB_UID not in container_env(pods_of_job(job)[0])
