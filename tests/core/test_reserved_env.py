"""What `spec.env` may not set is what tflaunch renders into the pods: derived, not listed.

A variable tflaunch sets and a user's `spec.env` also sets would be overridden silently (the
later entry wins in Kubernetes). The refusal is derived from the rendered env
(`launcher.core.pod_env`), so these tests hold for any variable render adds.
"""

from __future__ import annotations

from typing import Any

import pytest

from launcher.core import load, render
from launcher.core.errors import SpecError

EXAMPLE = "examples/mnist.yaml"


def _rendered_env_names(objects: list[dict[str, Any]]) -> set[str]:
    return {
        entry["name"]
        for obj in objects
        if obj["kind"] == "Job"
        for container in obj["spec"]["template"]["spec"]["containers"]
        for entry in container["env"]
    }


@pytest.mark.parametrize("layout", ["indexed", "per-worker"])
def test_every_variable_tflaunch_renders_is_refused_in_spec_env(layout: str) -> None:
    job = load.load_job(EXAMPLE, [("spec.layout", layout)])
    # the operator's children too: they carry the group's restarts
    objects = [*render.render(job), *render.render(job, backoff_limit=0, restarts=1)]
    names = _rendered_env_names(objects) - set(job.spec.env)
    assert {"TF_CONFIG", "WORKER_INDEX", "TFLAUNCH_RESTARTS"} <= names
    for name in sorted(names):
        with pytest.raises(SpecError, match=f"spec.env.{name}: is .*set by"):
            load.load_job(EXAMPLE, [("spec.layout", layout), ("spec.env", {name: "x"})])


def test_a_variable_tflaunch_does_not_set_is_the_user_s() -> None:
    job = load.load_job(EXAMPLE, [("spec.env", {"MY_SETTING": "on"})])
    env = render.render(job)[-1]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[-1] == {"name": "MY_SETTING", "value": "on"}


def test_the_operator_s_render_differs_only_in_what_it_is_given() -> None:
    job = load.load_job(EXAMPLE)
    plain = render.render(job)[-1]
    owner = {"apiVersion": "tflaunch.dev/v1alpha1", "kind": "MultiWorkerJob", "name": "m"}
    group = render.render(
        job, backoff_limit=0, restarts=2, owner=owner, job_annotations={"a.example/b": "c"}
    )[-1]
    assert (plain["spec"]["backoffLimit"], group["spec"]["backoffLimit"]) == (
        job.spec.backoff_limit * job.spec.workers,
        0,
    )
    assert group["metadata"]["ownerReferences"] == [owner]
    assert group["metadata"]["annotations"]["a.example/b"] == "c"
    env = group["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "TFLAUNCH_RESTARTS", "value": "2"} in env
