"""Fixtures of the cluster suite: a fake API server over real HTTP, a `Cluster` on it, and
the `tflaunch` command run against it through a kubeconfig."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from launcher.cli import main as cli
from launcher.cluster import apply
from launcher.cluster.client import Cluster
from launcher.core import load, render
from tests.cluster.fakeapi import FakeKubernetes
from tests.cluster.objects import pod_for


@pytest.fixture
def fake() -> Iterator[FakeKubernetes]:
    with FakeKubernetes().serve() as server:
        yield server


def cluster_at(url: str, namespace: str = "default") -> Cluster:
    """A Cluster built the way `connect()` builds one, only pointed at `url`."""
    configuration = client.Configuration(host=url)
    configuration.retries = 1
    return Cluster(client.ApiClient(configuration), namespace=namespace)


@pytest.fixture
def cluster(fake: FakeKubernetes) -> Iterator[Cluster]:
    api = cluster_at(fake.url)
    yield api
    api.close()


def write_kubeconfig(path: Path, url: str, namespace: str = "default") -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "me", "user": {"token": "secret"}}],
                "contexts": [
                    {
                        "name": "fake",
                        "context": {"cluster": "fake", "user": "me", "namespace": namespace},
                    }
                ],
                "current-context": "fake",
            }
        )
    )
    return path


@pytest.fixture
def kubeconfig(fake: FakeKubernetes, tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", fake.url)


@dataclasses.dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def tflaunch(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """Run `tflaunch ARGS --kubeconfig <fake>` and return its exit code and output."""

    def run(*args: str, connect: bool = True) -> Result:
        capsys.readouterr()
        argv = [*args, "--kubeconfig", str(kubeconfig)] if connect else list(args)
        code = cli.run(argv)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def job_objects(**overrides: Any) -> list[dict[str, Any]]:
    """The embedded default job (mnist, 2 workers, indexed), rendered; `spec.x=...` overrides."""
    pairs = [(k.replace("__", "."), v) for k, v in overrides.items()]
    if overrides.get("spec__gpusPerWorker") and "spec__image" not in overrides:
        pairs.append(("spec.image", "tflaunch-trainer:0.1.0"))  # the GPU build, not the default
    return render.render(load.load_job(None, pairs))


def submit(cluster: Cluster, **overrides: Any) -> list[dict[str, Any]]:
    """Apply a job; return the stored objects (with their uids)."""
    apply.apply_job(cluster, job_objects(**overrides))
    return [o for o in job_objects(**overrides)]


@pytest.fixture
def job(cluster: Cluster, fake: FakeKubernetes) -> dict[str, Any]:
    """The default job applied to the fake server; its stored Job (no pods yet)."""
    apply.apply_job(cluster, job_objects())
    stored = fake.get("Job", "mnist-worker")
    assert stored is not None
    return stored


@pytest.fixture
def running_job(job: dict[str, Any], fake: FakeKubernetes) -> dict[str, Any]:
    """`job` with both workers' pods Running."""
    fake.put(pod_for(job, 0))
    fake.put(pod_for(job, 1))
    return job
