"""spec.gang renders what each gang scheduler reads; every cross-field rule is refused by the
spec loader with the message the CRD carries (the API server's side: tests/e2e)."""

from __future__ import annotations

import pytest

from launcher.api import rules
from launcher.core import gang, render
from launcher.core.errors import SpecError
from launcher.core.load import job_from_document
from tests import rule_cases


def _job(**spec):
    doc = rule_cases.document(rules.PORT_RANGE)
    doc["metadata"]["name"] = "mnist"
    doc["spec"] = {"image": "tflaunch-trainer:1", "workers": 4, **spec}
    return job_from_document(doc)


def _by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def _pod(job_object):
    return job_object["spec"]["template"]


@pytest.mark.parametrize("layout", ["indexed", "per-worker"])
def test_volcano_gets_a_podgroup_of_all_workers_and_every_pod_joins_it(layout):
    objects = render.render(_job(gang="volcano", queueName="research", layout=layout))
    (group,) = _by_kind(objects, "PodGroup")
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert group["spec"] == {"minMember": 4, "queue": "research"}
    assert group["metadata"]["labels"]["tflaunch.dev/job-name"] == "mnist"
    assert objects.index(group) < objects.index(_by_kind(objects, "Job")[0])  # exists first
    for job in _by_kind(objects, "Job"):
        pod = _pod(job)
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "mnist"
        assert pod["spec"]["schedulerName"] == "volcano"


def test_coscheduling_gets_its_podgroup_and_the_pod_label():
    objects = render.render(_job(gang="coscheduling", schedulerName="scheduler-plugins"))
    (group,) = _by_kind(objects, "PodGroup")
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["spec"] == {"minMember": 4}
    (job,) = _by_kind(objects, "Job")
    assert _pod(job)["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "mnist"
    assert _pod(job)["spec"]["schedulerName"] == "scheduler-plugins"


def test_kueue_labels_the_one_indexed_job_and_creates_it_suspended():
    objects = render.render(_job(gang="kueue", queueName="team-a"))
    assert not _by_kind(objects, "PodGroup")
    (job,) = _by_kind(objects, "Job")
    assert job["metadata"]["labels"][gang.KUEUE_QUEUE_LABEL] == "team-a"
    assert job["spec"]["suspend"] is True
    assert job["spec"]["completionMode"] == "Indexed"


def test_no_gang_renders_what_it_always_did():
    objects = render.render(_job())
    assert [o["kind"] for o in objects] == ["Service", "NetworkPolicy", "Job"]
    (job,) = _by_kind(objects, "Job")
    assert job["spec"]["suspend"] is False
    assert "schedulerName" not in _pod(job)["spec"]


@pytest.mark.parametrize("rule", rules.RULES, ids=lambda r: f"{r.field}:{r.message[:30]}")
def test_every_rule_is_refused_by_the_loader_with_the_crds_message(rule):
    with pytest.raises(SpecError) as caught:
        job_from_document(rule_cases.document(rule))
    assert caught.value.field == rule.field
    assert str(caught.value).startswith(f"{rule.field}: ")
    assert rule.message in str(caught.value)


def test_every_rule_has_a_violation_case():
    assert set(rule_cases.VIOLATIONS) == set(rules.RULES)
