"""One violation of every cross-field rule (`launcher.api.rules`): the spec loader's test and
the real API server's (tests/e2e/test_admission.py) apply the same documents."""

from __future__ import annotations

import copy
from typing import Any

from launcher.api import rules

BASE: dict[str, Any] = {
    "apiVersion": "tflaunch.dev/v1alpha1",
    "kind": "MultiWorkerJob",
    "metadata": {"name": "ok"},
    "spec": {"image": "tflaunch-trainer:e2e", "workers": 2},
}

VIOLATIONS: dict[rules.Rule, tuple[str, dict[str, Any]]] = {
    rules.NAME_FORMAT: ("1st-job", {}),
    rules.NAME_LENGTH: ("a" * 54, {"workers": 12, "trainer": {"globalBatchSize": 12}}),
    rules.BATCH_DIVISIBLE: ("batch", {"workers": 3, "trainer": {"globalBatchSize": 256}}),
    rules.PORT_RANGE: ("port", {"port": 80}),
    rules.PER_WORKER_SIZE: (
        "many",
        {"layout": "per-worker", "workers": 501, "trainer": {"globalBatchSize": 501}},
    ),
    rules.KUEUE_INDEXED: ("kq", {"gang": "kueue", "queueName": "team", "layout": "per-worker"}),
    rules.CHIEF_PER_WORKER: ("chief", {"tfConfig": {"chief": "chief"}}),
    rules.KUEUE_QUEUE: ("kq", {"gang": "kueue"}),
    rules.QUEUE_NEEDS_GANG: ("q", {"queueName": "team"}),
    rules.VOLCANO_SCHEDULER: ("vs", {"gang": "volcano", "schedulerName": "default-scheduler"}),
    rules.METADATA_EGRESS: ("egress", {"networkPolicy": False, "denyMetadataEgress": True}),
    rules.EGRESS_POLICY: ("peers", {"networkPolicy": False, "egress": "peers"}),
    rules.EGRESS_TO: ("egress-to", {"egressTo": [{"cidr": "10.20.0.0/16"}]}),
    rules.RESTART_PORT: ("inplace", {"restart": "inPlace", "port": 65535}),
}


def document(rule: rules.Rule, namespace: str = "default") -> dict[str, Any]:
    """A MultiWorkerJob that breaks `rule` and nothing else."""
    name, spec = VIOLATIONS[rule]
    doc = copy.deepcopy(BASE)
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"].update(spec)
    return doc
