"""The kind rig for tests/kind: a cluster that `hack/kind.sh up` made (one control plane, two
workers, the registries beside it) and whose images `hack/kind.sh push` put in the registry.

The tests use the rig as they find it and never start or stop it (`make kind-rig-test` does
both around them): without a cluster up every test skips with one line saying how to bring
it up; with TFLAUNCH_REQUIRE_KIND=1 that is a failure instead. One namespace per test.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import ROOT, ControlPlane, Run, _cluster_sh

KIND_SH = ROOT / "hack" / "kind.sh"
CLUSTER = "tflaunch"
VERSION = next(
    line.split('"')[1]
    for line in (ROOT / "pyproject.toml").read_text().splitlines()
    if line.startswith("version = ")
)
TRAINER = f"tflaunch-trainer:{VERSION}-cpu"
HOW = "hack/kind.sh up && hack/kind.sh push, or make kind-rig-test"


def kind_sh(*args: str, timeout: float = 600) -> str:
    proc = subprocess.run(
        ["bash", str(KIND_SH), *args], capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"hack/kind.sh {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout.strip()


def _rig_env() -> dict[str, str]:
    """`hack/kind.sh env`'s export lines as a dict."""
    found = {}
    for line in kind_sh("env").splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        found[key] = shlex.split(value)[0] if value else ""
    return found


@dataclass
class Kind(ControlPlane):
    """The kind cluster, its docker daemon and its registries."""

    rig: dict[str, str] | None = None

    @property
    def registry(self) -> str:
        return self.setting("REGISTRY")

    @property
    def registry_auth(self) -> str:
        """The registry that serves the same images behind htpasswd."""
        return self.setting("REGISTRY_AUTH")

    @property
    def trainer(self) -> str:
        return f"{self.registry}/{TRAINER}"

    def setting(self, key: str) -> str:
        """One of `hack/kind.sh env`'s values, e.g. REGISTRY."""
        return (self.rig or {})[key]

    def env(self) -> dict[str, str]:
        return {**super().env(), "DOCKER_HOST": self.setting("DOCKER_HOST")}

    def docker(self, *args: str, check: bool = True, timeout: float = 180) -> Run:
        proc = subprocess.run(
            ["docker", *args], capture_output=True, text=True, env=self.env(), timeout=timeout
        )
        run = Run(proc.returncode, proc.stdout, proc.stderr)
        if check and run.code != 0:
            raise AssertionError(f"docker {' '.join(args)}: {run}")
        return run

    def workers(self) -> list[str]:
        """The worker nodes' names (the control plane is tainted: no job runs there)."""
        nodes = self.get("nodes")["items"]
        return sorted(
            n["metadata"]["name"]
            for n in nodes
            if "node-role.kubernetes.io/control-plane" not in n["metadata"]["labels"]
        )


def _absent() -> str | None:
    """Why the rig is not there to use, or None."""
    if os.geteuid() != 0:
        return "not root (the rig's docker daemon is root's)"
    try:
        rig = _rig_env()
    except (RuntimeError, OSError) as error:
        return f"hack/kind.sh env failed: {error}"
    kubeconfig = Path(rig["KUBECONFIG"])
    if not kubeconfig.exists():
        return f"no kind cluster {CLUSTER} is up (no {kubeconfig})"
    kind = Kind(kubeconfig, Path(_cluster_sh("bin")), owned=False, rig=rig)
    nodes = kind.kubectl("get", "nodes", "-o", "json", "--request-timeout=10s", check=False)
    if nodes.code != 0:
        return f"the kind cluster {CLUSTER} does not answer ({nodes.err.strip()[:200]})"
    ready = [
        n
        for n in json.loads(nodes.out)["items"]
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
    ]
    if len(ready) < 3:
        return f"{len(ready)} of the kind cluster's 3 nodes are Ready"
    name, _, tag = TRAINER.partition(":")
    try:
        with urllib.request.urlopen(f"http://{rig['REGISTRY']}/v2/{name}/tags/list") as answer:
            tags = json.load(answer).get("tags") or []
    except (urllib.error.URLError, OSError) as error:
        return f"the registry {rig['REGISTRY']} does not answer ({error})"
    if tag not in tags:
        return f"{rig['REGISTRY']} has no {TRAINER} (hack/kind.sh push)"
    return None


def _skip_or_fail(reason: str) -> str:
    message = f"kind: {reason}; bring the rig up first: {HOW}"
    if os.environ.get("TFLAUNCH_REQUIRE_KIND") == "1":
        pytest.fail(message, pytrace=False)
    return message


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without the rig, one skip line per file (with -ra) rather than one per test."""
    here = Path(__file__).parent
    mine = [item for item in items if here in item.path.parents]
    if not mine or os.environ.get("TFLAUNCH_REQUIRE_KIND") == "1":
        return
    reason = _absent()
    if reason:
        mark = pytest.mark.skip(reason=_skip_or_fail(reason))
        for item in mine:
            item.add_marker(mark)


@pytest.fixture(scope="session")
def kind() -> Kind:
    """The kind rig as it is; skips (or fails, TFLAUNCH_REQUIRE_KIND=1) when it is not up."""
    reason = _absent()
    if reason:
        pytest.skip(_skip_or_fail(reason))
    rig = _rig_env()
    return Kind(Path(rig["KUBECONFIG"]), Path(_cluster_sh("bin")), owned=False, rig=rig)


@pytest.fixture
def namespace(kind: Kind, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, removed afterwards (without waiting)."""
    base = request.node.name.split("[")[0].removeprefix("test_").replace("_", "-")[:40]
    name = f"{base.strip('-')}-{uuid.uuid4().hex[:5]}"
    kind.kubectl("create", "namespace", name)
    yield name
    kind.kubectl("delete", "namespace", name, "--wait=false", check=False)


def mnist_spec(path: Path, name: str, namespace: str, image: str, **spec: object) -> Path:
    """examples/mnist.yaml as `name` in `namespace` with `image`, one worker per node (a
    required pod anti-affinity: the group spans both kind workers), small and quick unless
    `spec` says otherwise."""
    doc = yaml.safe_load((ROOT / "examples" / "mnist.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    body = doc["spec"]
    body.update(image=image, imagePullPolicy="IfNotPresent")
    body["resources"] = {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"memory": "3Gi"}}
    body["trainer"] = {**body["trainer"], "epochs": 1, "stepsPerEpoch": 20}
    body["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"tflaunch.dev/job-name": name}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    body.update(spec)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
