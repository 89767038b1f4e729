"""The CRD is generated from the spec model, is a valid CRD, and accepts exactly the examples."""

from __future__ import annotations

import copy
import glob
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from launcher.api import identity, rules, spec
from launcher.core import load
from launcher.operator import crd
from tests.operator.sim import Cluster, resource, result_log

CRD_FILE = "manifests/operator/crd.yaml"
EXAMPLES = sorted(glob.glob("examples/*.yaml"))


def _open_api() -> dict[str, Any]:
    with open(CRD_FILE) as f:
        document = yaml.safe_load(f)
    return document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """A structural OpenAPI v3 schema as JSON Schema, with the API server's rules: unknown
    fields are errors (unless preserved), `nullable` admits null, int-or-string either."""
    out: dict[str, Any] = {}
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "type" in node:
        out["type"] = [node["type"], "null"] if node.get("nullable") else node["type"]
    if "enum" in node:
        out["enum"] = [*node["enum"], *([None] if node.get("nullable") else [])]
    if "required" in node:
        out["required"] = node["required"]
    if "properties" in node:
        out["properties"] = {k: json_schema(v) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = json_schema(node["additionalProperties"])
    if "items" in node:
        out["items"] = json_schema(node["items"])
    return out


def _validator() -> jsonschema.Draft7Validator:
    schema = json_schema(_open_api())
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: the server's own
    return jsonschema.Draft7Validator(schema)


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """What the API server stores: every missing field that has a default gets it, level by
    level (a nested object's defaults apply once the object exists)."""
    if not isinstance(value, dict) or "properties" not in schema:
        return value
    result = dict(value)
    for key, prop in schema["properties"].items():
        if key not in result and "default" in prop:
            result[key] = copy.deepcopy(prop["default"])
        if key in result:
            result[key] = apply_defaults(prop, result[key])
    return result


def test_the_checked_in_crd_is_generated_from_the_model():
    with open(CRD_FILE) as f:
        assert f.read() == crd.crd_yaml(), "stale CRD: run `make crd`"


def test_the_crd_is_a_valid_custom_resource_definition():
    with open(CRD_FILE) as f:
        document = yaml.safe_load(f)
    kubernetes_validate.validate(document, "1.29", strict=True)
    names = document["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == (
        "MultiWorkerJob", "multiworkerjobs", ["mwj"],
    )  # fmt: skip
    (version,) = document["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["Phase", "Workers", "Restarts", "Epoch", "ETA", "Age"]


def test_every_spec_field_is_in_the_schema_under_its_key_with_its_doc():
    properties = _open_api()["properties"]["spec"]["properties"]
    for field in spec.dataclasses.fields(spec.JobSpec):
        prop = properties[field.metadata["key"]]
        assert prop["description"].startswith(field.metadata["doc"])


@pytest.mark.parametrize("path", EXAMPLES)
def test_the_examples_validate_against_the_crd_schema(path):
    with open(path) as f:
        _validator().validate(yaml.safe_load(f))


@pytest.mark.parametrize(
    "change, complaint",
    [
        ({"wrokers": 3}, "Additional properties"),
        ({"workers": "two"}, "is not of type"),
        ({"layout": "sharded"}, "is not one of"),
        ({"trainer": {"saveFreq": 1.5}}, "is not valid"),
        ({"resources": {"limits": {"gpu": 1}}}, "Additional properties"),
        ({"env": {"A": 1}}, "is not of type"),
    ],
)
def test_the_schema_rejects_what_the_spec_loader_rejects(change, complaint):
    document = resource(change)
    errors = [e.message for e in _validator().iter_errors(document)]
    assert any(complaint in e for e in errors), errors


AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}
            ]
        }
    },
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 10,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"team": "a"}},
                },
            }
        ]
    },
}


def test_the_schema_admits_what_the_model_allows_to_be_null_and_a_real_affinity():
    document = resource(
        {
            "ttlSecondsAfterFinished": None,
            "trainer": {"stepsPerEpoch": None, "saveFreq": 100},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "affinity": AFFINITY,
        }
    )
    _validator().validate(document)


def test_affinity_has_core_v1_s_schema_so_a_typo_in_it_is_refused():
    document = resource({"affinity": {"nodeAffinity": {"requiredDuringScheduling": {}}}})
    errors = [e.message for e in _validator().iter_errors(document)]
    assert any("'requiredDuringScheduling' was unexpected" in e for e in errors), errors


def _walk(node: Any) -> Any:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_nothing_in_the_crd_keeps_unknown_fields():
    assert not [n for n in _walk(_open_api()) if "x-kubernetes-preserve-unknown-fields" in n]


def test_every_rule_is_in_the_crd_once_with_its_message():
    schema = _open_api()
    carried = [
        *schema["x-kubernetes-validations"],
        *schema["properties"]["spec"]["x-kubernetes-validations"],
    ]
    assert [(v["rule"], v["message"]) for v in carried] == [
        (r.cel, r.message) for r in sorted(rules.RULES, key=lambda r: r.scope != "root")
    ]


def test_field_bounds_come_from_the_spec_model():
    properties = _open_api()["properties"]["spec"]["properties"]
    assert (properties["workers"]["minimum"], properties["workers"]["maximum"]) == (
        1, spec.MAX_WORKERS,
    )  # fmt: skip
    assert properties["trainer"]["properties"]["epochs"]["minimum"] == 1
    assert properties["queueName"]["maxLength"] == 63
    assert properties["schedulerName"]["pattern"] == rules.DNS_1123_SUBDOMAIN


def test_the_api_servers_defaults_give_the_same_job_as_the_spec_loaders():
    minimal = {
        "apiVersion": identity.API_VERSION,
        "kind": identity.KIND,
        "metadata": {"name": "mnist", "namespace": "default"},
        "spec": {"image": "tflaunch-trainer:0.1.0", "resources": {"limits": {"cpu": "3"}}},
    }
    stored = apply_defaults(_open_api(), minimal)
    assert stored["spec"]["trainer"]["epochs"] == 3
    assert stored["spec"]["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}
    assert load.job_from_document(stored) == load.job_from_document(minimal)
    _validator().validate(stored)


def test_every_default_is_valid_for_its_own_field():
    def walk(node: dict[str, Any], where: str) -> None:
        if "default" in node:
            jsonschema.Draft7Validator(json_schema(node)).validate(node["default"])
        for key, child in node.get("properties", {}).items():
            walk(child, f"{where}.{key}")

    walk(_open_api(), "")


def test_every_status_the_operator_writes_fits_the_status_schema():
    status_schema = jsonschema.Draft7Validator(json_schema(_open_api()["properties"]["status"]))
    cluster = Cluster(resource({"backoffLimit": 1}), chief_log=result_log())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.fail_worker(0)
    cluster.settle()
    cluster.start_workers()
    cluster.complete()
    cluster.settle()
    statuses = [crd.document_of(p.status) for p in cluster.plans if p.status is not None]
    assert {s["phase"] for s in statuses} >= {"Created", "Running", "Restarting", "Succeeded"}
    for status in statuses:
        status_schema.validate(status)


def test_a_status_read_back_is_the_status_written():
    cluster = Cluster(resource(), chief_log=result_log())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    written = cluster.plans[-2].status
    assert crd.status_from_document(crd.document_of(written)) == written


def test_a_hand_edited_status_field_does_not_stop_the_operator_reading_the_rest():
    status = crd.status_from_document(
        {"phase": "Dancing", "restarts": "two", "workersReady": 1, "conditions": [{"x": 1}]}
    )
    assert (status.phase, status.restarts, status.workers_ready) == (None, 0, 1)
