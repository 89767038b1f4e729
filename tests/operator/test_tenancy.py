"""The operator's allowlist (issue 27 item 4): a MultiWorkerJob cannot get the scheduler to
preempt other tenants, tolerate every taint or pick nodes beyond what the admin allowed."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.api import spec as spec_model
from launcher.core import load
from launcher.core.errors import SpecError
from launcher.operator.observe import Observed
from launcher.operator.reconcile import decide
from launcher.operator.tenancy import Allowlist
from tests.operator.sim import resource

CHART = Allowlist.parse("", "nvidia.com/gpu", "kubernetes.io/arch,nvidia.com/gpu.product")


def _job(**spec: Any) -> spec_model.MultiWorkerJob:
    return load.job_from_document({**resource(spec), "metadata": {"name": "mnist"}})


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"priorityClassName": "system-node-critical"}, "spec.priorityClassName"),
        ({"tolerations": [{"operator": "Exists"}]}, "spec.tolerations[0].key"),
        ({"tolerations": [{"key": "dedicated", "operator": "Exists"}]}, "spec.tolerations[0].key"),
        ({"nodeSelector": {"kubernetes.io/hostname": "node-7"}}, "spec.nodeSelector."),
        (
            {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["node-7"]}]}]}}}},
            "spec.affinity.nodeAffinity",
        ),
    ],
)  # fmt: skip
def test_what_the_allowlist_lacks_is_refused_naming_the_field(
    spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(SpecError) as refused:
        CHART.check(_job(**spec))
    assert refused.value.field.startswith(field)
    assert "ask the cluster admin" in str(refused.value)


def test_what_it_allows_passes_and_no_list_allows_anything() -> None:
    allowed = _job(
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        nodeSelector={"nvidia.com/gpu.product": "A100"},
    )
    CHART.check(allowed)
    Allowlist().check(_job(priorityClassName="system-node-critical"))
    Allowlist.parse("*", "*", "*").check(_job(tolerations=[{"operator": "Exists"}]))


def test_a_refused_multiworkerjob_fails_with_invalid_spec_and_creates_nothing() -> None:
    observed = Observed(resource({"priorityClassName": "system-node-critical"}), policy=CHART)
    plan = decide(observed)
    assert plan.create == ()
    assert plan.status is not None and plan.status.phase == "Failed"
    assert plan.status.reason == "InvalidSpec"
    assert "spec.priorityClassName" in (plan.status.message or "")
