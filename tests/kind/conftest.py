"""The kind rig for tests/kind: a cluster that `hack/kind.sh up` made (one control plane, two
workers, the registries beside it) and whose images `hack/kind.sh push` put in the registry.

A rig that is up is used as it is and left up. Otherwise the session fixture brings one up
itself when this machine can (root, Debian's docker.io, skopeo and htpasswd, the rig's tools
built or Go to build them, the offline images built), pushes the images built for these
sources, and takes it down at the end of the session, as tests/node does with its node. A
lock keeps two sessions on one machine from sharing the rig. When it cannot, every test
skips with one line saying what is missing; with CI=true or TFLAUNCH_REQUIRE_KIND=1 that is a
failure instead. One namespace per test.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
IMAGES_SH = ROOT / "hack" / "images.sh"


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
    """Why the rig is not there to use (a cluster of Ready nodes, the trainer image in its
    registry), or None."""
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


def _cluster_answers() -> bool:
    """Whether a kind cluster of this rig is up (someone's own `hack/kind.sh up`)."""
    rig = _rig_env()
    kubeconfig = Path(rig["KUBECONFIG"])
    if not kubeconfig.exists():
        return False
    kind = Kind(kubeconfig, Path(_cluster_sh("bin")), owned=False, rig=rig)
    return kind.kubectl("get", "--raw", "/readyz", "--request-timeout=5s", check=False).code == 0


def _required() -> bool:
    return (
        os.environ.get("TFLAUNCH_REQUIRE_KIND") == "1" or os.environ.get("CI", "").lower() == "true"
    )


def _skip_or_fail(reason: str) -> str:
    message = f"kind: {reason}"
    if _required():
        pytest.fail(message, pytrace=False)
    return message


def _cannot_start() -> str | None:
    """Why this session cannot bring the rig up itself, or None."""
    if os.geteuid() != 0:
        return "not root (the rig's docker daemon is root's)"
    for tool, package in (("dockerd", "docker.io"), ("docker", "docker.io"),
                          ("skopeo", "skopeo"), ("htpasswd", "apache2-utils")):  # fmt: skip
        if shutil.which(tool) is None:
            return f"{tool} not found (apt-get install {package})"
    if shutil.which("go") is None and not _tools_built():
        return "the rig's tools are not built and Go is not installed"
    for image in ("trainer", "operator"):
        if _archive(image) is None:
            return f"the {image} image is not built for these sources (make images-offline)"
    return None


def _tools_built() -> bool:
    rig = _rig_env()
    kind_dir = Path(rig["KUBECONFIG"]).parent
    return (kind_dir / "kind").exists() and (kind_dir / "kubeadm").exists()


def _archive(image: str) -> Path | None:
    """The archive hack/images.sh built of `image` for these sources, or None."""
    proc = subprocess.run(
        ["bash", str(IMAGES_SH), "path", image], capture_output=True, text=True, timeout=120
    )
    path = Path(proc.stdout.strip())
    return path if proc.returncode == 0 and path.exists() else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a rig up and without what it takes to start one, one skip line per file (with
    -ra) rather than one per test."""
    here = Path(__file__).parent
    mine = [item for item in items if here in item.path.parents]
    if not mine or _required():
        return
    reason = _absent() and _cannot_start()
    if reason:
        mark = pytest.mark.skip(reason=_skip_or_fail(f"{reason}; or bring the rig up: {HOW}"))
        for item in mine:
            item.add_marker(mark)


@pytest.fixture(scope="session")
def kind() -> Iterator[Kind]:
    """The kind rig: the one that is up, or one this session starts and stops. `hack/kind.sh
    up` is idempotent (on a cluster that exists it only sets the nodes' routes and policy
    credentials again), and the push is of the images built for these sources."""
    cache = Path(_cluster_sh("port-lock")).parent
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "kind.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held for the session: one rig per machine
        reason = _cannot_start()
        if reason:
            pytest.skip(_skip_or_fail(f"{reason}; or bring the rig up: {HOW}"))
        owned = not _cluster_answers()
        if owned:
            kind_sh("down", timeout=300)  # whatever an interrupted session left behind
        try:
            kind_sh("up", timeout=3600)  # cold: the rig's own builds first
            kind_sh("push", timeout=1800)
            reason = _absent()
            if reason:
                pytest.fail(f"kind: the rig is not usable after up and push: {reason}")
            rig = _rig_env()
            yield Kind(Path(rig["KUBECONFIG"]), Path(_cluster_sh("bin")), owned=False, rig=rig)
        finally:
            if owned:
                kind_sh("down", timeout=300)


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
    `spec` says otherwise (`trainer` merged into the example's; a key set to None left out)."""
    doc = yaml.safe_load((ROOT / "examples" / "mnist.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    body = doc["spec"]
    body.update(image=image, imagePullPolicy="IfNotPresent")
    body["resources"] = {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"memory": "3Gi"}}
    trainer: dict[str, Any] = dict(spec.pop("trainer", None) or {})  # type: ignore[call-overload]
    body["trainer"] = {**body["trainer"], "epochs": 1, "stepsPerEpoch": 20, **trainer}
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
    for key in [key for key, value in body.items() if value is None]:
        del body[key]  # None: the example's setting left out
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def own_program_spec(path: Path, namespace: str, image: str, name: str, *args: str) -> Path:
    """mnist_spec for a job that runs the user's program with `args`: no built-in trainer
    section."""
    mnist_spec(path, name, namespace, image, args=list(args))
    document = yaml.safe_load(path.read_text())
    del document["spec"]["trainer"]
    path.write_text(yaml.safe_dump(document))
    return path


def shared_claim(kind: Kind, namespace: str) -> str:
    """A ReadWriteMany claim `checkpoints` on a directory of the host that every kind node
    mounts; returns its PersistentVolume's name."""
    host = Path(kind.setting("SHARED")) / namespace
    host.mkdir(parents=True, exist_ok=True)
    os.chmod(host, 0o777)  # the trainer runs as a non-root user
    return host_path_claim(kind, namespace, f"ckpt-{namespace}", f"/tflaunch-shared/{namespace}")


def host_path_claim(kind: Kind, namespace: str, volume: str, path: str) -> str:
    """A claim `checkpoints` in `namespace` bound to a hostPath PersistentVolume `volume` of
    `type: Directory` at `path` on the nodes (the kubelet checks that it is a directory)."""
    kind.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": path, "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": "checkpoints"},
            },
        }
    )
    kind.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "checkpoints", "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )
    return volume


def backup_saved(kind: Kind, namespace: str) -> bool:
    """The chief's first epoch-end backup is on shared_claim's directory (its `checkpoint`
    index, which TensorFlow writes after the data)."""
    return any((Path(kind.setting("SHARED")) / namespace).glob("**/chief/checkpoint"))


def worker_pod(kind: Kind, namespace: str, index: int) -> dict[str, Any]:
    """Worker `index`'s pod (the newest, if the Job replaced one)."""
    pods = kind.get(
        "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-completion-index={index}"
    )["items"]
    return dict(max(pods, key=lambda p: p["metadata"]["creationTimestamp"]))


def crictl(kind: Kind, node: str, *args: str) -> str:
    """crictl inside kind node `node` (its containerd)."""
    return kind.docker("exec", node, "crictl", *args).out.strip()
