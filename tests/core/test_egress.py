"""spec.egress: peers limits the workers' egress to their peers, DNS and what the user names
(egressTo) in the job's NetworkPolicy; the default, open, leaves it as it was."""

from __future__ import annotations

import pytest

from launcher.core import render
from launcher.core.errors import SpecError
from launcher.core.load import load_job

EXAMPLE = "examples/mnist.yaml"
PEERS = [("spec.egress", "peers")]
STORAGE = {"cidr": "10.20.0.0/16", "port": 443}


def _policy(overrides):
    objects = {o["kind"]: o for o in render.render(load_job(EXAMPLE, overrides))}
    return objects["NetworkPolicy"]["spec"]


def test_open_egress_is_the_default_and_renders_no_egress_rule():
    policy = _policy([])
    assert policy["policyTypes"] == ["Ingress"] and "egress" not in policy


def test_peers_egress_allows_the_jobs_own_workers_on_their_ports_and_dns_only():
    policy = _policy(PEERS)

    assert policy["policyTypes"] == ["Ingress", "Egress"]
    peers, dns = policy["egress"]
    assert peers["to"] == [{"podSelector": {"matchLabels": policy["podSelector"]["matchLabels"]}}]
    assert (
        peers["ports"]
        == policy["ingress"][0]["ports"]
        == [
            {"protocol": "TCP", "port": 2222},
            {"protocol": "TCP", "port": 2223},  # the control port: restart in place, the default
        ]
    )
    assert "to" not in dns  # the cluster's DNS may be pods, a node cache or a host process
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]


def test_peers_egress_with_restart_recreate_allows_the_tensorflow_port_alone():
    (peers, _) = _policy([*PEERS, ("spec.restart", "recreate")])["egress"]
    assert peers["ports"] == [{"protocol": "TCP", "port": 2222}]


def test_peers_egress_of_gpu_workers_allows_every_tcp_port_between_them():
    gpu = [
        ("spec.gpusPerWorker", 2),
        ("spec.trainer.globalBatchSize", 256),
        ("spec.image", "tflaunch-trainer:0.1.0"),
    ]
    (peers, _) = _policy([*PEERS, *gpu])["egress"]
    assert peers["ports"] == [{"protocol": "TCP"}]  # NCCL picks its own ports


def test_each_destination_the_user_names_is_one_more_rule():
    everything = {"cidr": "203.0.113.7/32", "protocol": "UDP"}
    policy = _policy([*PEERS, ("spec.egressTo", [STORAGE, everything])])

    _, _, storage, other = policy["egress"]
    assert storage == {
        "to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
        "ports": [{"protocol": "TCP", "port": 443}],
    }
    assert other["to"] == [{"ipBlock": {"cidr": "203.0.113.7/32"}}]
    assert other["ports"] == [{"protocol": "UDP"}]


def test_a_named_range_holding_the_metadata_address_keeps_it_out_with_deny_metadata_egress():
    wide = [("spec.egressTo", [{"cidr": "0.0.0.0/0", "port": 443}])]
    (rule,) = _policy([*PEERS, *wide, ("spec.denyMetadataEgress", True)])["egress"][2:]
    assert rule["to"] == [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}}]
    (kept,) = _policy([*PEERS, *wide])["egress"][2:]
    assert kept["to"] == [{"ipBlock": {"cidr": "0.0.0.0/0"}}]


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ([*PEERS, ("spec.networkPolicy", False)], "spec.egress", "needs spec.networkPolicy: true"),
        ([("spec.egressTo", [STORAGE])], "spec.egressTo", "only applies with spec.egress: peers"),
        (
            [*PEERS, ("spec.egressTo", [{"cidr": "10.20.0.1/16"}])],
            "spec.egressTo[0].cidr",
            "must be a network such as 10.20.0.0/16",
        ),
        ([*PEERS, ("spec.egressTo", [{"cidr": "storage"}])], "spec.egressTo[0].cidr", "'storage'"),
        ([*PEERS, ("spec.egressTo", [{"port": 443}])], "spec.egressTo[0].cidr", ""),
        (
            [*PEERS, ("spec.egressTo", [{"cidr": "10.0.0.0/8", "port": 0}])],
            "spec.egressTo[0].port",
            "",
        ),
        ([("spec.egress", "closed")], "spec.egress", "peers"),
    ],
)
def test_a_bad_egress_setting_is_refused_naming_its_field(overrides, field, words):
    with pytest.raises(SpecError) as caught:
        load_job(EXAMPLE, overrides)
    assert caught.value.field == field, caught.value
    assert words in str(caught.value)
