"""A Job anyone may create, labelled as tflaunch's with a worker-index of 10^23, on the real
API server (issue 27 item 9): `list -A` and `status` finish and show a bounded worker count
(they built `range(1e23)`, growing ~50 MB/s)."""

from __future__ import annotations

import json

import pytest
import yaml

from launcher.core import render
from launcher.core.load import load_job
from tests.e2e.conftest import ControlPlane

pytestmark = pytest.mark.e2e

HUGE = "99999999999999999999999"


def test_list_and_status_of_a_job_with_a_hostile_worker_index_finish(
    control_plane: ControlPlane, namespace: str
) -> None:
    cp = control_plane
    job = load_job(None, [("metadata.name", "evil"), ("metadata.namespace", namespace),
                          ("spec.layout", "per-worker"), ("spec.workers", 1),
                          ("spec.image", "tflaunch-trainer:e2e")])  # fmt: skip
    (worker,) = [o for o in render.render(job) if o["kind"] == "Job"]
    worker["spec"]["template"]["metadata"]["labels"]["tflaunch.dev/worker-index"] = HUGE
    worker["spec"]["suspend"] = True  # no pods: the label alone is the attack
    cp.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(worker))

    listed = cp.tflaunch("list", "-A", "-o", "json", timeout=60)
    assert listed.code == 0, listed
    (row,) = [j for j in json.loads(listed.out)["items"] if j["metadata"]["name"] == "evil"]
    assert row["spec"]["workers"] == 1, row
    status = cp.tflaunch("status", "evil", "-n", namespace, "-o", "json", timeout=60)
    assert status.code == 0, status
    assert json.loads(status.out)["spec"]["workers"] == 1, status.out
