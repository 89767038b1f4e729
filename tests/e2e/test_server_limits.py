"""Specs the real API server refuses are refused by render first (issue 27 item 14).

For each case: the same objects rendered with tflaunch's checks bypassed
(`dataclasses.replace` after validation) go to the real control plane as a server-side
dry-run, and the server refuses them (or, for what only the kernel refuses at exec, takes
them: why tflaunch must); then `tflaunch render` of the spec is one line naming the field,
exit 2. A server 500 for an object server-side apply cannot merge is worded as the object's
problem, not "restarting or overloaded".
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.api.spec import Checkpoint, Script
from launcher.core import render
from launcher.core.load import load_job
from launcher.core.script import MOUNT_PATH as SCRIPT_MOUNT
from tests.e2e.conftest import ControlPlane, write_spec

pytestmark = pytest.mark.e2e

PREFIX_254 = ".".join(["a" * 63] * 4)[:253] + "b"
NODE = "nodeAffinity"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _node_required(requirement: dict[str, Any] | None) -> dict[str, Any]:
    terms = [{"matchExpressions": [requirement]}] if requirement else []
    return {NODE: {REQUIRED: {"nodeSelectorTerms": terms}}}


def _pod_anti(topology: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": topology}
    return {"podAntiAffinity": {REQUIRED: [term]}}


# (case id, spec field values, the field render names, does the API server refuse it?)
CASES: list[tuple[str, dict[str, Any], str, bool]] = [
    ("label-prefix-254", {"labels": {f"{PREFIX_254}/k": "v"}}, "spec.labels", True),
    ("annotations-300KiB", {"annotations": {"example.com/big": "x" * 300_000}},
     "spec.annotations", True),
    ("node-selector-space", {"node_selector": {"pool": "a b"}}, "spec.nodeSelector.pool", True),
    ("node-selector-64", {"node_selector": {"pool": "a" * 64}}, "spec.nodeSelector.pool", True),
    ("no-node-terms", {"affinity": _node_required(None)}, "spec.affinity", True),
    ("in-without-values", {"affinity": _node_required({"key": "a", "operator": "In"})},
     "spec.affinity", True),
    ("bogus-operator", {"affinity": _node_required({"key": "a", "operator": "Bogus"})},
     "spec.affinity", True),
    ("exists-with-values",
     {"affinity": _node_required({"key": "a", "operator": "Exists", "values": ["x"]})},
     "spec.affinity", True),
    ("weight-0", {"affinity": {NODE: {PREFERRED: [{"weight": 0, "preference": {
        "matchExpressions": [{"key": "a", "operator": "Exists"}]}}]}}}, "spec.affinity", True),
    ("empty-topology-key", {"affinity": _pod_anti("")}, "spec.affinity", True),
    ("duplicate-pull-secret", {"image_pull_secrets": ("regcred", "regcred")},
     "spec.imagePullSecrets[1]", True),
    ("env-value-129KiB", {"env": {"BIG": "x" * (129 * 1024)}}, "spec.env.BIG", False),
    ("env-total-3MB", {"env": {f"V{i}": "x" * 100_000 for i in range(30)}}, "spec.env", False),
    ("nul-in-env", {"env": {"A": "x\0y"}}, "spec.env.A", False),
    ("nul-in-args", {"command": ("python", "t.py"), "args": ("a\0b",)}, "spec.args[0]", False),
    ("arg-129KiB", {"command": ("python", "t.py"), "args": ("x" * (129 * 1024),)},
     "spec.args[0]", False),
    ("mount-over-script",
     {"script": Script("t.py", "print(1)\n"), "checkpoint": Checkpoint(mount_path=SCRIPT_MOUNT)},
     "spec.checkpoint.mountPath", True),
]  # fmt: skip


def _bypassed(**spec_fields: Any) -> list[dict[str, Any]]:
    """The example's objects with `spec_fields` set after validation."""
    job = load_job("examples/mnist.yaml", [("metadata.namespace", "default")])
    job = dataclasses.replace(job, spec=dataclasses.replace(job.spec, **spec_fields))
    return [o for o in render.render(job) if o["kind"] in ("Job", "Service", "ConfigMap")]


def _override(field: str, value: Any) -> tuple[str, Any]:
    key = {"node_selector": "nodeSelector", "image_pull_secrets": "imagePullSecrets"}.get(
        field, field
    )
    if isinstance(value, Script):
        return f"spec.{key}", {"name": value.name, "source": value.source}
    if isinstance(value, Checkpoint):
        return f"spec.{key}", {"mountPath": value.mount_path}
    return f"spec.{key}", list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize(("case", "fields", "named", "server_refuses"), CASES,
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_what_the_server_or_the_kernel_refuses_render_refuses_in_one_line(
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
    case: str,
    fields: dict[str, Any],
    named: str,
    server_refuses: bool,
) -> None:
    cp = control_plane
    objects = _bypassed(**fields)
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
    dry_run = cp.kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=tflaunch", "-f", "-",
        stdin=yaml.safe_dump_all(objects), check=False,
    )  # fmt: skip
    assert (dry_run.code != 0) == server_refuses, dry_run
    spec = write_spec(tmp_path / "job.yaml", "limits", namespace)
    overrides = [_override(k, v) for k, v in fields.items()]
    document = yaml.safe_load(spec.read_text())
    for path, value in overrides:
        document["spec"][path.removeprefix("spec.")] = value
    spec.write_text(yaml.safe_dump(document))
    run = cp.tflaunch("render", str(spec))  # render alone: no server to refuse it later
    assert run.code == 2, run
    assert run.err.count("\n") == 1 and named in run.err, run
    assert cp.tflaunch("submit", str(spec)).code == 2
    assert cp.get("jobs", "-n", namespace)["items"] == []  # nothing applied


def test_a_500_for_an_object_apply_cannot_merge_is_the_objects_fault_not_an_outage(
    control_plane: ControlPlane, namespace: str
) -> None:
    from launcher.cluster import client
    from launcher.core.errors import Invalid

    cluster = client.connect(str(control_plane.kubeconfig), None)
    (job,) = [o for o in _bypassed(image_pull_secrets=("a", "a")) if o["kind"] == "Job"]
    job["metadata"]["namespace"] = namespace
    with pytest.raises(Invalid) as caught:
        cluster.apply(job)
    message = str(caught.value)
    assert "500" in message and "duplicate entries" in message
    assert "overloaded" not in message and "retrying cannot help" in message
