"""Two operator replicas on the real control plane (issue 10 item 9): both run as processes
with the ServiceAccount's token and `--leader-elect`; only the holder of the Lease acts, a
status write based on a stale read is refused by the API server, and the standby takes over
when the leader stops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.cluster import client
from launcher.operator import controller, crd, reconcile
from tests.e2e.conftest import ROOT, ControlPlane, eventually, pod_hooks, stop_process
from tests.e2e.test_operator import (
    OPERATOR_NS,
    _mwj,
    _phase_is,
    install_operator,
)

pytestmark = pytest.mark.e2e


class Replica:
    """`tflaunch operator -A --leader-elect` as the Deployment runs it (one of two)."""

    def __init__(self, kubeconfig: Path, log: Path) -> None:
        self.log_path = log
        self._log = log.open("w")
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "launcher", "operator", "-A", "--liveness", "",
             "--leader-elect", "--lease-namespace", OPERATOR_NS, "--kubeconfig", str(kubeconfig)],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
        )  # fmt: skip

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int | None:
        stop_process(self.process)
        self._log.close()
        return self.process.returncode


@pytest.fixture(scope="module")
def replicas(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Replica]]:
    home = tmp_path_factory.mktemp("replicas")
    kubeconfig = install_operator(control_plane, home)
    running = [Replica(kubeconfig, home / f"operator-{i}.log") for i in range(2)]
    try:
        yield running
    finally:
        for replica in running:
            replica.stop()


def _holder(cp: ControlPlane) -> str:
    lease = cp.kubectl("get", "lease", "tflaunch-operator", "-n", OPERATOR_NS, "-o", "json",
                       check=False)  # fmt: skip
    if lease.code != 0:
        return ""
    return str(json.loads(lease.out)["spec"].get("holderIdentity") or "")


def _leader(cp: ControlPlane, replicas: list[Replica]) -> tuple[Replica, Replica]:
    """(leader, standby), once one holds the Lease and the other says it waits."""

    def check() -> Any:
        holder = _holder(cp)
        leading = [r for r in replicas if holder and f"as {holder}" in r.log()]
        waiting = [r for r in replicas if "standby: Lease" in r.log()]
        if len(leading) == 1 and waiting and waiting[0] is not leading[0]:
            return leading[0], waiting[0]
        return None

    found: tuple[Replica, Replica] = eventually(check, what="one leader, one standby", timeout=90)
    return found


def _restarted_events(cp: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cp.get("events", "-n", namespace)["items"]
        if e["reason"] == "Restarted" and e["involvedObject"]["name"] == name
    ]


def test_two_replicas_restart_a_failed_group_exactly_once(
    control_plane: ControlPlane, replicas: list[Replica], namespace: str
) -> None:
    cp = control_plane
    leader, standby = _leader(cp, replicas)
    hooks = pod_hooks(run_for="2s", worker_exit={1: 1}, fail_once=True)
    cp.apply(_mwj("twice", namespace, hooks, backoffLimit=3))

    status = eventually(
        _phase_is(cp, "twice", namespace, "Succeeded"), what="Succeeded after one restart",
        timeout=150,
    )  # fmt: skip

    assert status["restarts"] == 1, status
    assert len(_restarted_events(cp, namespace, "twice")) == 1
    assert "twice" not in standby.log(), "the standby must not act"
    assert leader.process.poll() is None and standby.process.poll() is None


def test_a_status_write_based_on_a_stale_read_is_refused_and_nothing_else_is_done(
    control_plane: ControlPlane, replicas: list[Replica], namespace: str
) -> None:
    cp = control_plane
    cp.apply(_mwj("stale", namespace, pod_hooks(run_for="forever")))
    cp.wait_active(namespace, "stale-worker")
    cluster = client.connect(str(cp.kubeconfig))
    stale = cluster.get(controller.MULTIWORKERJOB, "stale", namespace)
    assert stale is not None  # what a reconcile read; then the resource changes
    cp.kubectl("annotate", "mwj", "stale", "-n", namespace, "changed=since")
    plan = reconcile.Plan(
        status=crd.Status(phase="Restarting", reason="WorkerFailed", restarts=7),
        delete_jobs=("stale-worker",),
    )

    with pytest.raises(controller.StaleRead):
        controller.execute(cluster, stale, plan)

    assert cp.get("mwj", "stale", "-n", namespace)["status"].get("restarts", 0) == 0
    job = cp.get("job", "stale-worker", "-n", namespace)
    assert not job["metadata"].get("deletionTimestamp"), "a stale decision must not act"


def test_the_standby_takes_over_when_the_leader_stops(
    control_plane: ControlPlane, replicas: list[Replica], namespace: str
) -> None:
    cp = control_plane
    leader, standby = _leader(cp, replicas)
    old = _holder(cp)

    assert leader.stop() == 0  # SIGTERM: it releases the Lease on the way out
    eventually(lambda: _holder(cp) not in ("", old), what="the standby holding the Lease")
    cp.apply(_mwj("after", namespace, pod_hooks(run_for="2s")))

    eventually(_phase_is(cp, "after", namespace, "Succeeded"), what="Succeeded", timeout=120)
    assert f"as {_holder(cp)}" in standby.log()
