"""`tflaunch operator` as a process, as the Deployment runs it: it connects with a kubeconfig,
serves its liveness endpoint, creates the Jobs of an applied MultiWorkerJob, and stops on
SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import urllib.request
from pathlib import Path

import kmock as kmock_lib
import pytest
import yaml

from tests.operator.conftest import JOBS, NAMESPACE, Api
from tests.operator.sim import resource
from tests.operator.test_kopf_e2e import eventually

pytestmark = pytest.mark.timeout(60)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "mock", "cluster": {"server": server}}],
                "users": [{"name": "me", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "mock", "context": {"cluster": "mock", "user": "me",
                                                          "namespace": NAMESPACE}}],
                "current-context": "mock",
            }
        )
    )  # fmt: skip
    return path


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


async def test_the_operator_process_serves_health_creates_jobs_and_stops_on_sigterm(
    api: Api, tmp_path: Path
):
    api.mock.resources["v1/namespaces"] = kmock_lib.ResourceInfo(kind="Namespace", verbs={"list"})
    api.mock.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = (
        kmock_lib.ResourceInfo(kind="CustomResourceDefinition", verbs={"list"})
    )
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", api.cluster.server)
    health = f"http://127.0.0.1:{_free_port()}/healthz"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "launcher", "operator", "--kubeconfig", str(kubeconfig),
        "--liveness", health,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        await eventually(lambda: _healthy(health), seconds=20)
        body = resource()
        body["metadata"].update(uid="uid-process")
        await api.create_resource(body)
        await eventually(lambda: "mnist-worker" in api.objects(JOBS))
        await eventually(lambda: api.status().phase == "Created")
        kopf_calls = [r for r in api.mock if r.headers.get("User-Agent", "").startswith("kopf")]
        assert kopf_calls  # kopf's watches use the kubeconfig's credentials too
        assert all(r.headers.get("Authorization") == "Bearer t0ken" for r in kopf_calls)
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(process.communicate(), 20)
    assert process.returncode == 0, output.decode()
