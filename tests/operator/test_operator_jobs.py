"""`tflaunch submit --operator` applies the spec file's own MultiWorkerJob (flags included),
and the CLI names the custom resource as the CRD does."""

from __future__ import annotations

import pytest

from launcher.api import identity
from launcher.cli.operator_jobs import document_of, state_text
from launcher.cluster import operated
from launcher.core import load
from launcher.operator import crd


def test_the_cli_names_the_resource_as_the_crd_does() -> None:
    kind = operated.MULTIWORKERJOB
    assert (kind.plural, kind.api_version, kind.kind) == (crd.PLURAL, crd.API_VERSION, crd.KIND)


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        [("spec.workers", 4), ("spec.layout", "per-worker")],
        [("spec.trainer.stepsPerEpoch", 7), ("metadata.namespace", "ml")],
    ],
)
def test_the_applied_document_reads_back_as_the_same_job(
    overrides: list[tuple[str, object]],
) -> None:
    job = load.load_job("examples/mnist.yaml", overrides)

    assert load.job_from_document(document_of(job)) == job


def test_a_job_is_controlled_by_a_multiworkerjob_only_through_a_controller_reference() -> None:
    ref = {"apiVersion": identity.API_VERSION, "kind": identity.KIND, "name": "m", "uid": "u"}
    assert (
        operated.controller_of({"metadata": {"ownerReferences": [{**ref, "controller": True}]}})
        == "m"
    )
    assert operated.controller_of({"metadata": {"ownerReferences": [ref]}}) is None
    assert operated.controller_of({"metadata": {}}) is None


def test_list_shows_the_operators_phase_and_restarts() -> None:
    assert state_text({"status": {"phase": "Restarting", "restarts": 1}}) == (
        "Restarting (operator, 1 restart)"
    )
    assert state_text({}) == "Pending (operator)"
