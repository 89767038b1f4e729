"""spec.restart: what inPlace (the default where the job runs the worker wrapper) adds to the
rendered objects, and that recreate adds nothing."""

from __future__ import annotations

import pytest

from launcher.core import contract, exit_policy, restart
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


def _renders_in_place(objects: dict[str, list[dict]]) -> bool:
    """The control port, the container restart rule and the Job's uid, all or none."""
    (job,), (service,) = objects["Job"], objects["Service"]
    container = _container(job)
    ports = [p["name"] for p in container["ports"]]
    parts = {
        "wrapper flag": "--restart-in-place" in container.get("args", []),
        "control port": "tflaunch-ctl" in ports,
        "service port": "tflaunch-ctl" in [p["name"] for p in service["spec"]["ports"]],
        "restart rules": "restartPolicyRules" in container,
        "job uid": contract.ENV_JOB_UID in container_env(pods_of_job(job)[0]),
    }
    assert len(set(parts.values())) == 1, parts
    return all(parts.values())


def test_in_place_is_the_default_of_a_job_that_runs_the_wrapper() -> None:
    """The built-in MNIST spec, restart unwritten: control port, restart rules, job uid."""
    assert _renders_in_place(_objects())
    (job,) = _objects()["Job"]
    assert run.parse_args(_container(job)["args"], {}).restart_in_place == 3  # backoffLimit


def test_recreate_renders_no_control_port() -> None:
    objects = _objects(("spec.restart", "recreate"))
    assert not _renders_in_place(objects)
    (job,) = objects["Job"]
    container = _container(job)
    assert run.parse_args(container["args"], {}).restart_in_place is None
    assert [p["name"] for p in container["ports"]] == ["tf-grpc"]
    assert "restartPolicy" not in container and "restartPolicyRules" not in container
    (service,) = objects["Service"]
    assert [p["name"] for p in service["spec"]["ports"]] == ["tf-grpc"]
    (policy,) = objects["NetworkPolicy"]
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 2222}]


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ((("spec.entrypoint", "image"), ("spec.trainer", {})), "no worker wrapper"),
        ((("spec.port", 65535),), "no port above the TensorFlow port"),
    ],
)
def test_a_job_that_cannot_restart_in_place_defaults_to_recreate_without_an_error(
    overrides: tuple[tuple[str, object], ...], why: str
) -> None:
    job = load_job("examples/mnist.yaml", list(overrides))
    assert job.spec.restart is None and restart.mode(job.spec) == "recreate", why
    assert not _renders_in_place(_objects(*overrides))


@pytest.mark.parametrize("layout", ["indexed", "per-worker"])
def test_in_place_gives_every_wrapper_its_jobs_uid(layout: str) -> None:
    """The key of the generation a plain Job's recreated pods continue (trainer.generation_file):
    the Job's uid, from the label the API server sets on its pods."""
    objects = _objects(("spec.restart", "inPlace"), ("spec.layout", layout))
    for job in objects["Job"]:
        for pod in pods_of_job(job):
            assert container_env(pod)[contract.ENV_JOB_UID] == JOB_UID


def test_recreate_renders_no_job_uid() -> None:
    (job,) = _objects(("spec.restart", "recreate"))["Job"]
    assert contract.ENV_JOB_UID not in container_env(pods_of_job(job)[0])


@pytest.mark.parametrize("layout", ["indexed", "per-worker"])
def test_in_place_lets_the_kubelet_restart_a_killed_container_in_its_pod(layout: str) -> None:
    """A container whose wrapper was SIGKILLed (exit 137) restarts in the same pod, by the
    container's restartPolicyRules; every other exit still ends the pod (restartPolicy Never),
    so the podFailurePolicy keeps its meaning."""
    objects = _objects(("spec.restart", "inPlace"), ("spec.layout", layout))
    for job in objects["Job"]:
        template = job["spec"]["template"]["spec"]
        container = _container(job)
        assert template["restartPolicy"] == "Never"
        assert container["restartPolicy"] == "Never"
        assert container["restartPolicyRules"] == [
            {"action": "Restart", "exitCodes": {"operator": "In", "values": [137]}}
        ]
        codes = [
            code
            for rule in job["spec"]["podFailurePolicy"]["rules"]
            for code in rule.get("onExitCodes", {}).get("values", [])
        ]
        assert 137 not in codes


def test_a_stored_job_without_the_rule_is_a_cluster_that_dropped_it() -> None:
    """What `submit` reads back to say once that a killed container will recreate its pod:
    an API server that does not serve ContainerRestartRules drops the field."""
    (job,) = _objects(("spec.restart", "inPlace"))["Job"]
    assert not exit_policy.restart_rules_dropped(job)
    for container in job["spec"]["template"]["spec"]["containers"]:
        container.pop("restartPolicy")
        container.pop("restartPolicyRules")
    assert exit_policy.restart_rules_dropped(job)
    assert not exit_policy.restart_rules_dropped(None)  # not readable: nothing to say
