"""spec.gang: kueue with Kueue itself running: its manager (v0.19.2, built from the pinned
module by hack/kueue.sh and cached) runs on this host against the session's control plane,
its webhooks and controllers real. Each test gets a ClusterQueue of its own with a GPU quota
smaller than the kwok nodes' 8 GPUs, so that Kueue, not the scheduler, decides: a job that
fits is admitted whole and its pods start; one that does not fit stays suspended with no pod
at all, and `tflaunch status`/`wait` say why in Kueue's words; freeing quota admits it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import test_operator
from tests.e2e.conftest import ROOT, ControlPlane, eventually, pod_hooks, stop_process, write_spec
from tests.e2e.test_operator import Operator, _mwj, _phase_is

pytestmark = pytest.mark.e2e
operator = test_operator.operator  # the operator fixture (its own process) in this module too

KUEUE_SH = ROOT / "hack" / "kueue.sh"
QUOTA_GPUS = 4
WAITING = "waiting for Kueue admission in queue team"


def _kueue_sh(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(KUEUE_SH), *args], capture_output=True, text=True, timeout=600,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


PODS_READY_SECONDS = 30
"""Kueue's waitForPodsReady timeout here (kwok's pods are ready within a second or two)."""


METRICS_CERTS = Path("/etc/kueue/metrics/certs")


def _unavailable(reason: str) -> None:
    if os.environ.get("TFLAUNCH_REQUIRE_IMAGES") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@contextlib.contextmanager
def running_kueue(cp: ControlPlane, pods_ready: str = f"{PODS_READY_SECONDS}s") -> Iterator[bool]:
    """Kueue's manager running against `cp` (hack/kueue.sh up), stopped at the end, webhooks
    removed first; True when started here (with the waitForPodsReady timeout `pods_ready`),
    False when it was up already (a reused cluster's). Without the cached manager the test
    skips (fails with TFLAUNCH_REQUIRE_IMAGES=1, as CI builds it)."""
    binary = Path(_kueue_sh("bin").stdout.strip())
    if not binary.is_file():
        _unavailable(f"Kueue's manager is not built ({binary}): run hack/kueue.sh build")
    if not (METRICS_CERTS / "tls.crt").exists() and os.geteuid() != 0:
        _unavailable(f"not root, and Kueue's manager exits without {METRICS_CERTS}/tls.crt "
                     "(hack/kueue.sh up writes one as root)")  # fmt: skip
    kubeconfig = str(cp.kubeconfig)
    already = Path(f"{cp.kubeconfig.resolve()}.kueue").exists()
    if not already:
        timeout = {"KUEUE_PODS_READY_TIMEOUT": pods_ready}
        started = _kueue_sh("up", kubeconfig, env=timeout)
        assert started.returncode == 0, started.stderr
    try:
        yield not already
    finally:
        if not already:
            stopped = _kueue_sh("down", kubeconfig)
            assert stopped.returncode == 0, stopped.stderr


@pytest.fixture(scope="module")
def kueue(control_plane: ControlPlane) -> Iterator[bool]:
    """Kueue running against the control plane for this module (`running_kueue`)."""
    with running_kueue(control_plane) as started:
        yield started


def own_queue(namespace: str, quota: dict[str, str]) -> list[dict[str, Any]]:
    """LocalQueue `team` in `namespace` on a ClusterQueue of its own (named like it, serving
    only it) with `quota` of the hack/kueue.sh flavor; a higher-priority workload preempts
    lower ones."""
    resources = [{"name": name, "nominalQuota": value} for name, value in quota.items()]
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": namespace},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": list(quota),
                        "flavors": [{"name": "tflaunch", "resources": resources}],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": namespace},
            "spec": {"clusterQueue": namespace},
        },
    ]


@pytest.fixture
def queue(control_plane: ControlPlane, kueue: bool, namespace: str) -> Iterator[str]:
    """LocalQueue `team` in the test's namespace, on a ClusterQueue of its own (so no other
    test's job uses its quota): 16 CPUs, 64Gi, `QUOTA_GPUS` GPUs; a higher-priority workload
    preempts lower ones."""
    quota = {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": str(QUOTA_GPUS)}
    control_plane.apply(own_queue(namespace, quota))
    eventually(
        lambda: control_plane.kubectl(
            "wait", "--for=condition=Active", f"clusterqueue/{namespace}", "--timeout=5s",
            check=False,
        ).code == 0,
        what=f"ClusterQueue {namespace} active",
    )  # fmt: skip
    yield "team"
    # Deleted the way a user deletes them, until gone: the namespace's own deletion leaves
    # running pods Terminating on the kwok nodes (holding their GPUs) for minutes.
    names = control_plane.kubectl(
        "get",
        "jobs",
        "-n",
        namespace,
        "-o",
        r"jsonpath={.items[*].metadata.labels.tflaunch\.dev/job-name}",
    ).out.split()
    for name in sorted(set(names)):
        control_plane.tflaunch("delete", name, "-n", namespace, "--timeout", "60s")


def _submit(
    cp: ControlPlane,
    tmp_path: Path,
    name: str,
    namespace: str,
    workers: int,
    gpus: int,
    run: str,
    **spec: Any,
) -> None:
    path = write_spec(
        tmp_path / f"{name}.yaml", name, namespace, workers=workers, gpusPerWorker=gpus,
        gang="kueue", queueName="team", trainer={"globalBatchSize": workers * gpus * 8},
        hooks=pod_hooks(run_for=run), **spec,
    )  # fmt: skip
    submitted = cp.tflaunch("submit", str(path))
    assert submitted.code == 0, submitted


def _workload(cp: ControlPlane, name: str, namespace: str) -> dict[str, Any] | None:
    """The Workload Kueue made for job `name`'s Job, or None yet."""
    uid = cp.get("job", f"{name}-worker", "-n", namespace)["metadata"]["uid"]
    found = cp.get("workloads", "-n", namespace, "-l", f"kueue.x-k8s.io/job-uid={uid}")
    return found["items"][0] if found["items"] else None


def _condition(workload: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    conditions = ((workload or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def _admitted(cp: ControlPlane, name: str, namespace: str) -> bool:
    admitted = _condition(_workload(cp, name, namespace), "Admitted")
    return admitted is not None and admitted["status"] == "True"


def _held_back(cp: ControlPlane, name: str, namespace: str) -> str | None:
    """Kueue's message once it has found no room for job `name` (QuotaReserved False)."""
    reserved = _condition(_workload(cp, name, namespace), "QuotaReserved")
    if reserved is None or reserved["status"] != "False" or not reserved.get("message"):
        return None
    return str(reserved["message"])


def _pods(cp: ControlPlane, name: str, namespace: str) -> list[dict[str, Any]]:
    return list(cp.get("pods", "-n", namespace, "-l", f"tflaunch.dev/job-name={name}")["items"])


def _lines_of(process: subprocess.Popen[str]) -> list[str]:
    """The lines `process` writes on stderr, collected as they come (a thread reads them)."""
    lines: list[str] = []
    assert process.stderr is not None
    stream = process.stderr

    def read() -> None:
        for line in iter(stream.readline, ""):
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _status_condition(cp: ControlPlane, name: str, namespace: str) -> str:
    shown = cp.tflaunch("status", name, "-n", namespace)
    assert shown.code == 0, shown
    return next(line for line in shown.out.splitlines() if line.startswith("condition: "))


def test_a_job_that_fits_the_queue_is_admitted_whole_and_its_pods_start_on_gpu_nodes(
    control_plane: ControlPlane, queue: str, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    _submit(cp, tmp_path, "fits", namespace, workers=2, gpus=2, run="600s")  # 4 of 4 GPUs

    eventually(lambda: _admitted(cp, "fits", namespace), what="the Workload admitted")
    pods = eventually(
        lambda: (lambda p: p if len(p) == 2 else None)(_pods(cp, "fits", namespace)),
        what="both worker pods",
    )
    assert cp.get("job", "fits-worker", "-n", namespace)["spec"]["suspend"] is False
    placed = eventually(
        lambda: all(p["spec"].get("nodeName") for p in _pods(cp, "fits", namespace)),
        what="both pods scheduled",
    )
    assert placed
    nodes = {p["spec"]["nodeName"] for p in _pods(cp, "fits", namespace)}
    assert nodes <= {"kwok-gpu-0", "kwok-gpu-1"}, nodes
    assert len(pods) == 2
    eventually(
        lambda: (
            "Running, 2/2 workers running" in cp.tflaunch("status", "fits", "-n", namespace).out
        ),
        what="tflaunch status: Running",
    )


def test_a_job_beyond_the_free_quota_creates_no_pod_says_why_and_starts_when_quota_frees(
    control_plane: ControlPlane, queue: str, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    _submit(cp, tmp_path, "first", namespace, workers=2, gpus=1, run="600s")  # 2 of 4 GPUs
    eventually(lambda: _admitted(cp, "first", namespace), what="the first job admitted")
    _submit(cp, tmp_path, "second", namespace, workers=3, gpus=1, run="3s")  # 3 more: no room

    message = eventually(
        lambda: _held_back(cp, "second", namespace), what="Kueue holding the second job back"
    )
    assert "nvidia.com/gpu" in message, message
    assert cp.get("job", "second-worker", "-n", namespace)["spec"]["suspend"] is True
    assert _pods(cp, "second", namespace) == []  # no worker holds a GPU waiting for its peers
    assert _status_condition(cp, "second", namespace) == f"condition: {WAITING}: {message}"
    waited = cp.tflaunch("wait", "second", "-n", namespace, "--timeout", "5s")
    assert waited.code == 4, waited  # still waiting at its timeout: not a failure
    assert f"second: {WAITING}: {message}" in waited.err, waited

    follower = cp.popen_tflaunch("wait", "second", "-n", namespace, "--timeout", "120s")
    lines = _lines_of(follower)
    try:
        eventually(lambda: any(WAITING in line for line in lines), what="the wait saying why")
        deleted = cp.tflaunch("delete", "first", "-n", namespace)
        assert deleted.code == 0, deleted
        follower.wait(timeout=150)
    finally:
        stop_process(follower)
    err = "".join(lines)
    assert follower.returncode == 0, err  # admitted, ran its 3 s, succeeded
    assert "job second succeeded" in err, err
    assert _admitted(cp, "second", namespace)
    assert len(_pods(cp, "second", namespace)) == 3


def test_a_job_larger_than_the_whole_queue_is_never_admitted_and_kueue_says_so(
    control_plane: ControlPlane, queue: str, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    _submit(cp, tmp_path, "huge", namespace, workers=3, gpus=2, run="60s")  # 6 GPUs > 4

    message = eventually(lambda: _held_back(cp, "huge", namespace), what="Kueue's verdict")
    assert f"maximum capacity ({QUOTA_GPUS})" in message, message
    assert _pods(cp, "huge", namespace) == []
    assert _status_condition(cp, "huge", namespace) == f"condition: {WAITING}: {message}"


def test_a_higher_priority_job_preempts_a_running_one_which_waits_and_then_succeeds(
    control_plane: ControlPlane, queue: str, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    urgent = f"urgent-{namespace}"
    cp.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": urgent},
            "value": 1000,
        }
    )
    follower = None
    try:
        _submit(cp, tmp_path, "low", namespace, workers=2, gpus=2, run="30s")  # all 4 GPUs
        eventually(lambda: len(_pods(cp, "low", namespace)) == 2, what="the low job's pods")
        follower = cp.popen_tflaunch("wait", "low", "-n", namespace, "--timeout", "240s")
        lines = _lines_of(follower)
        eventually(lambda: any("low: running" in line for line in lines), what="the wait following")
        _submit(cp, tmp_path, "high", namespace, workers=2, gpus=2, run="20s",
                priorityClassName=urgent)  # fmt: skip

        eventually(lambda: _admitted(cp, "high", namespace), what="the high job admitted")
        evicted = _condition(_workload(cp, "low", namespace), "Evicted")
        assert evicted is not None and evicted["reason"] == "Preempted", evicted
        assert cp.get("job", "low-worker", "-n", namespace)["spec"]["suspend"] is True
        said = _status_condition(cp, "low", namespace)
        assert said.startswith(f"condition: {WAITING}: "), said
        assert f"Preempted: {' '.join(evicted['message'].split())}" in said, said

        # The high job ends after 20 s; its quota goes back and Kueue admits the low one again,
        # which runs its 30 s: the wait that followed it all along ends in success.
        follower.wait(timeout=270)
        err = "".join(lines)
        assert follower.returncode == 0, err
        assert f"low: {WAITING}: " in err and "Preempted: " in err, err
        assert "job low succeeded" in err and "restarted" not in err, err
        job = cp.get("job", "low-worker", "-n", namespace)
        assert not (job.get("status") or {}).get("failed"), job["status"]  # no retry used
        assert _admitted(cp, "low", namespace)
        shown = cp.tflaunch("status", "low", "-n", namespace, "-o", "json")
        assert json.loads(shown.out)["status"]["kueueEvictions"] == {"Preempted": 1}, shown.out
        said = cp.tflaunch("status", "low", "-n", namespace).out
        assert "evicted by Kueue once (Preempted): " in said, said
    finally:
        if follower is not None:
            stop_process(follower)
        cp.kubectl("delete", "priorityclass", urgent, "--ignore-not-found")


def test_a_gang_whose_pods_cannot_all_become_ready_is_evicted_and_requeued_not_failed(
    control_plane: ControlPlane, kueue: bool, queue: str, namespace: str, tmp_path: Path
) -> None:
    if not kueue:
        pytest.skip("Kueue was already up for this cluster, with its own waitForPodsReady timeout")
    cp = control_plane
    nowhere = {"tflaunch.dev/no-such-node": "true"}  # admitted on quota, never scheduled
    _submit(cp, tmp_path, "stuck", namespace, workers=2, gpus=1, run="600s", nodeSelector=nowhere)
    eventually(lambda: _admitted(cp, "stuck", namespace), what="the Workload admitted")
    eventually(lambda: len(_pods(cp, "stuck", namespace)) == 2, what="both pods, Pending")

    evicted = eventually(
        lambda: (lambda c: c if c and c["status"] == "True" else None)(
            _condition(_workload(cp, "stuck", namespace), "Evicted")
        ),
        what="Kueue's eviction after its waitForPodsReady timeout",
        timeout=PODS_READY_SECONDS + 60,
    )
    assert evicted["reason"] == "PodsReadyTimeout", evicted
    eventually(
        lambda: (
            cp.get("job", "stuck-worker", "-n", namespace)["spec"]["suspend"] is True
            and _pods(cp, "stuck", namespace) == []
        ),
        what="the Job suspended again, its pods removed",
    )
    said = _status_condition(cp, "stuck", namespace)
    assert said.startswith(f"condition: {WAITING}: "), said
    assert f"PodsReadyTimeout: {' '.join(evicted['message'].split())}" in said, said
    waited = cp.tflaunch("wait", "stuck", "-n", namespace, "--timeout", "5s")
    assert waited.code == 4, waited  # requeued, still waiting: not a training failure
    assert "PodsReadyTimeout: " in waited.err, waited
    job = cp.get("job", "stuck-worker", "-n", namespace)
    assert not (job.get("status") or {}).get("failed"), job["status"]


def test_the_operators_jobs_are_admitted_or_held_by_kueue_and_it_and_wait_say_why(
    control_plane: ControlPlane, operator: Operator, queue: str, namespace: str
) -> None:
    cp = control_plane
    kueue = {"gang": "kueue", "queueName": "team", "image": "tflaunch-trainer:e2e"}  # not -cpu
    cp.apply(_mwj("ofits", namespace, pod_hooks(run_for="3s"), workers=2, gpusPerWorker=1,
                  trainer={"globalBatchSize": 16}, **kueue))  # fmt: skip
    cp.apply(_mwj("ohuge", namespace, pod_hooks(run_for="3s"), workers=3, gpusPerWorker=2,
                  trainer={"globalBatchSize": 48}, **kueue))  # fmt: skip

    eventually(_phase_is(cp, "ofits", namespace, "Succeeded"), what="ofits Succeeded", timeout=150)
    assert _admitted(cp, "ofits", namespace)
    message = eventually(lambda: _held_back(cp, "ohuge", namespace), what="Kueue's verdict")
    assert f"maximum capacity ({QUOTA_GPUS})" in message, message
    assert _pods(cp, "ohuge", namespace) == []
    assert _status_condition(cp, "ohuge", namespace) == f"condition: {WAITING}: {message}"

    def suspended_condition() -> dict[str, Any] | None:  # the operator's own words
        conditions = cp.get("multiworkerjobs", "ohuge", "-n", namespace)["status"]["conditions"]
        found = [c for c in conditions if c["type"] == "Suspended" and c["status"] == "True"]
        return found[0] if found and found[0]["message"].startswith(WAITING) else None

    held = eventually(suspended_condition, what="the MultiWorkerJob saying why", timeout=60)
    assert (held["reason"], held["message"]) == ("Queued", f"{WAITING}: {message}"), held
    waited = cp.tflaunch("wait", "ohuge", "-n", namespace, "--timeout", "5s")
    assert waited.code == 4, waited
    assert f"ohuge: {WAITING}: {message}" in waited.err, waited
