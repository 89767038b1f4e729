"""A real node for tests/node: hack/cluster.sh's control plane with hack/node.sh's kubelet,
containerd (runc), CNI bridge and CoreDNS beside the kwok nodes, so these pods run in
containers. The control plane and the node start once per session.

The node is a singleton on the machine (one bridge, one CoreDNS address): tests/conftest.py
keeps every module here on one xdist worker, and a lock file keeps two pytest sessions from
starting it at once. It is tainted `tflaunch.dev/real-node=true:NoSchedule`, so only the
pods made here (`real_pod`) run on it. Outside CI the tests skip with one line when the node
cannot start here (not root, no runc, no Go); with CI=true that is a failure instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import BINARIES, ROOT, ControlPlane, _cluster_sh

NODE_SH = ROOT / "hack" / "node.sh"
IMAGES_SH = ROOT / "hack" / "images.sh"
NODE_NAME = "tflaunch-real-0"
REAL_NODE = "tflaunch.dev/real-node"
"""The label and the taint key of the real node."""
SMOKE_IMAGE = "tflaunch.dev/busybox:1"
"""Debian's static busybox in a one-layer image (hack/node.sh smoke-image)."""


def node_sh(*args: str, timeout: float = 3600) -> str:
    proc = subprocess.run(
        ["bash", str(NODE_SH), *args], capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"hack/node.sh {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout.strip()


def unavailable(reason: str) -> None:
    message = f"node: {reason}, so the real-node tests cannot run here"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _missing_prerequisite() -> str | None:
    if os.geteuid() != 0:
        return "not root (the node runs containers)"
    tools = (("runc", "runc"), ("iptables", "iptables"), ("ipset", "ipset"), ("openssl", "openssl"))
    for tool, package in tools:
        if shutil.which(tool) is None:
            return f"{tool} not found (apt-get install {package})"
    if shutil.which("busybox") is None and not Path("/bin/busybox").exists():
        return "busybox not found (apt-get install busybox-static)"
    built = all((Path(node_sh("bin")) / b).exists() for b in ("kubelet", "containerd"))
    control_plane = all((Path(_cluster_sh("bin")) / b).exists() for b in BINARIES)
    if not (built and control_plane) and shutil.which("go") is None:
        return "the node's binaries are not built and Go is not installed"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Outside CI, a node that cannot start here skips the whole suite: one line with -ra
    (a skip mark folds into one line per file; a skip from a fixture is one per test)."""
    here = Path(__file__).parent
    mine = [item for item in items if here in item.path.parents]
    if not mine or os.environ.get("CI", "").lower() == "true":
        return
    reason = _missing_prerequisite()
    if reason:
        mark = pytest.mark.skip(reason=f"node: {reason}, so the real-node tests cannot run here")
        for item in mine:
            item.add_marker(mark)


@pytest.fixture(scope="session")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane whose nodes are the kwok ones plus NODE_NAME, a real kubelet."""
    reason = _missing_prerequisite()
    if reason:
        unavailable(reason)
    cache = Path(_cluster_sh("port-lock")).parent
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "node.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held for the session: one node per machine
        node_sh("down")  # whatever an interrupted session left behind
        kubeconfig = tmp_path_factory.mktemp("node-cluster") / "kubeconfig"
        _cluster_sh("up", str(kubeconfig))
        try:
            node_sh("up", str(kubeconfig), node_sh("smoke-image"))
            yield ControlPlane(kubeconfig, Path(_cluster_sh("bin")), owned=True)
        finally:
            try:
                node_sh("down")
            finally:
                _cluster_sh("down", str(kubeconfig))


def real_pod(name: str, command: str, **spec: Any) -> dict[str, Any]:
    """A pod of the smoke image running `sh -c command` on the real node, once."""
    pod_spec: dict[str, Any] = {
        "nodeSelector": {REAL_NODE: "true"},
        "tolerations": [{"key": REAL_NODE, "operator": "Exists", "effect": "NoSchedule"}],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "main",
                "image": SMOKE_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", command],
            }
        ],
        **spec,
    }
    labels = pod_spec.pop("labels", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": pod_spec,
    }


def _archive() -> Path:
    given = os.environ.get("TFLAUNCH_TRAINER_ARCHIVE")
    if given:
        return Path(given)
    if not IMAGES_SH.exists():
        pytest.skip("node: no hack/images.sh here to build the trainer image")
    return built_archive("trainer")


def built_archive(image: str) -> Path:
    """The archive hack/images.sh built of `image` (trainer, operator) for these sources."""
    proc = subprocess.run(
        ["bash", str(IMAGES_SH), "path", image], capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        unavailable(
            f"the {image} image is not built for these sources (hack/images.sh build {image})"
        )
    return Path(proc.stdout.strip())


def image_ref(archive: Path) -> str:
    """The reference an image archive (docker-archive or OCI) is imported under."""
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        if "manifest.json" in names:
            member = tar.extractfile("manifest.json")
            assert member is not None
            return str(json.load(member)[0]["RepoTags"][0])
        member = tar.extractfile("index.json")
        assert member is not None
        annotations = json.load(member)["manifests"][0]["annotations"]
        return str(annotations["io.containerd.image.name"])


@pytest.fixture(scope="session")
def trainer_image(real_node: ControlPlane) -> str:
    """The CPU trainer image, imported into the real node's containerd once per session (the
    2 GB archive takes about 40 s)."""
    archive = _archive()
    node_sh("import", str(archive), timeout=900)
    return image_ref(archive)
