"""The operator's Prometheus metrics, fed by the real controller against the API mock, and
served over HTTP as Prometheus scrapes them. (On the real control plane:
tests/e2e/test_operator.py scrapes a running `tflaunch operator`.)"""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from launcher.cli.main import run
from launcher.operator.controller import Controller
from launcher.operator.metrics import PHASES, OperatorMetrics, parse_address
from tests.operator.conftest import Api


def _controller(api: Api) -> tuple[Controller, OperatorMetrics]:
    metrics = OperatorMetrics()
    api.cluster.error_observers.append(metrics.api_error)
    return Controller(api.cluster, lambda resource, event: None, metrics), metrics


def _value(metrics: OperatorMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_phases_restarts_and_durations_follow_the_reconciles(api: Api):
    controller, metrics = _controller(api)
    api.add_resource({"backoffLimit": 2})
    await controller.trigger("default", "mnist")
    assert _value(metrics, "tflaunch_multiworkerjobs", phase="Created") == 1
    api.run_jobs()
    await controller.trigger("default", "mnist")
    assert _value(metrics, "tflaunch_multiworkerjobs", phase="Running") == 1
    assert _value(metrics, "tflaunch_multiworkerjobs", phase="Created") == 0
    assert _value(metrics, "tflaunch_group_restarts_total", namespace="default") == 0

    api.fail_worker(1, exit_code=1)
    await controller.trigger("default", "mnist")
    assert _value(metrics, "tflaunch_multiworkerjobs", phase="Restarting") == 1
    assert _value(metrics, "tflaunch_group_restarts_total", namespace="default") == 1
    await controller.trigger("default", "mnist")  # the same restart, seen again: not counted
    assert _value(metrics, "tflaunch_group_restarts_total", namespace="default") == 1
    assert _value(metrics, "tflaunch_reconcile_duration_seconds_count") == 4
    controller.stop()


async def test_a_deleted_resource_leaves_the_phase_counts(api: Api):
    controller, metrics = _controller(api)
    api.add_resource()
    await controller.trigger("default", "mnist")
    assert sum(_value(metrics, "tflaunch_multiworkerjobs", phase=p) for p in PHASES) == 1
    not_found = _value(metrics, "tflaunch_api_errors_total", code="404")
    del api.mock.objects["tflaunch.dev/v1alpha1/multiworkerjobs", "default", "mnist"]
    await controller.trigger("default", "mnist")
    assert sum(_value(metrics, "tflaunch_multiworkerjobs", phase=p) for p in PHASES) == 0
    assert _value(metrics, "tflaunch_api_errors_total", code="404") == not_found + 1  # its get
    controller.stop()


async def test_api_errors_are_counted_by_status_code(api: Api):
    controller, metrics = _controller(api)
    api.add_resource()
    api.mock["post", "/api/v1/namespaces/default/services"] << 403 << {
        "kind": "Status", "code": 403, "reason": "Forbidden", "message": "forbidden",
    }  # fmt: skip
    await controller._reconcile("default", "mnist")
    assert _value(metrics, "tflaunch_api_errors_total", code="403") == 1
    controller.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_are_served_on_slash_metrics_in_prometheus_text_format():
    metrics = OperatorMetrics()
    metrics.api_error(409)
    with metrics.timing():
        pass
    address = f"127.0.0.1:{_free_port()}"
    metrics.serve(address)
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    phases = {s.labels["phase"]: s.value for s in families["tflaunch_multiworkerjobs"].samples}
    assert phases == dict.fromkeys(PHASES, 0.0)
    errors = [s for s in families["tflaunch_api_errors"].samples if s.name.endswith("_total")]
    assert [(s.labels, s.value) for s in errors] == [({"code": "409"}, 1.0)]
    assert "tflaunch_reconcile_duration_seconds" in families
    assert "tflaunch_group_restarts" in families


@pytest.mark.parametrize(
    ("address", "expected"),
    [("0.0.0.0:8081", ("0.0.0.0", 8081)), (":9000", ("0.0.0.0", 9000)),
     ("[::1]:8081", ("::1", 8081))],
)  # fmt: skip
def test_metrics_addresses_parse(address, expected):
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["8081", "host:", "host:port", "host:70000"])
def test_a_bad_metrics_address_is_one_line_and_exit_2(address, capsys):
    assert run(["operator", "--metrics-address", address]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--metrics-address" in err and "host:port" in err
