"""The real control plane for the e2e tests: kube-apiserver, kube-controller-manager,
kube-scheduler and etcd built from their Go modules, with kwok's fake nodes (hack/cluster.sh).

One cluster per test session, one namespace per test. The commands under test run as real
processes (`python -m launcher`, `kubectl`), so what is asserted is what the API server stored
and its controllers decided. kwok runs no containers: a pod's end comes from the Stages in
hack/kwok/stages.yaml, steered by pod annotations (`pod_hooks`).

Set TFLAUNCH_E2E_KUBECONFIG to reuse a cluster from `make cluster-up` (the tests that restart
the control plane are skipped then). Without Go and without cached binaries the tests skip
with one line; with CI=true that is a failure instead.
"""

from __future__ import annotations

import base64
import datetime
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = ROOT / "hack" / "cluster.sh"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd")


@dataclass
class Run:
    """A finished command: exit code and both streams."""

    code: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


@dataclass
class ControlPlane:
    """A running cluster: its admin kubeconfig and the directory of its binaries."""

    kubeconfig: Path
    bin_dir: Path
    owned: bool
    """True when this session started it (and may stop and restart it)."""
    _port_lock: IO[str] | None = field(default=None, repr=False)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env.pop("TFLAUNCH_DEBUG", None)
        return env

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> Run:
        proc = subprocess.run(
            [str(self.bin_dir / "kubectl"), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=120,
        )
        run = Run(proc.returncode, proc.stdout, proc.stderr)
        if check and run.code != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {run}")
        return run

    def get(self, *args: str) -> Any:
        """`kubectl get ... -o json`, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").out)

    def apply(self, objects: Any, namespace: str | None = None) -> Run:
        docs = objects if isinstance(objects, list) else [objects]
        ns = ["-n", namespace] if namespace else []
        return self.kubectl("apply", *ns, "-f", "-", stdin=yaml.safe_dump_all(docs))

    def tflaunch(self, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> Run:
        """The real CLI as a subprocess, against this cluster."""
        proc = subprocess.run(
            [sys.executable, "-m", "launcher", *args],
            capture_output=True,
            text=True,
            env={**self.env(), **(env or {})},
            cwd=ROOT,
            timeout=timeout,
        )
        return Run(proc.returncode, proc.stdout, proc.stderr)

    def submit(
        self,
        path: Path,
        name: str,
        namespace: str,
        *args: str,
        hooks: dict[str, str] | None = None,
        timeout: float = 120,
        **spec: Any,
    ) -> Run:
        """`write_spec(path, ...)`, then `tflaunch submit` of it with `args`."""
        write_spec(path, name, namespace, hooks=hooks, **spec)
        return self.tflaunch("submit", str(path), *args, timeout=timeout)

    def popen_tflaunch(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "launcher", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(),
            cwd=ROOT,
        )

    def install_crd(self) -> None:
        """Apply the MultiWorkerJob CRD as shipped; returns once the server serves it."""
        self.kubectl("apply", "-f", str(ROOT / "manifests/operator/crd.yaml"))
        self.wait_established("multiworkerjobs.tflaunch.dev")

    def wait_established(self, *crds: str) -> None:
        """Until the server serves every CRD named. `kubectl wait` alone is not enough: on a
        CRD so new that it has no status yet it fails at once (`.status.conditions accessor
        error: <nil>`), about one time in five here."""
        names = [f"crd/{crd}" for crd in crds]
        eventually(
            lambda: self.kubectl(
                "wait", "--for=condition=Established", *names, "--timeout=10s", check=False
            ).code == 0,
            what=f"{', '.join(crds)} established",
        )  # fmt: skip

    def serve_logs(self, namespace: str, log_file: Path) -> None:
        """Make kwok's kubelet server answer pods/log of every trainer container in
        `namespace` from `log_file` (CRI log format: `cri_log_line`), through the real API
        server. kwok runs no containers: the log is whatever the test writes there. Its
        followed streams never end on their own (its runtime stub reports every container
        as still running), so a test ends `logs -f` itself."""
        log = {"containers": ["trainer"], "logsFile": str(log_file), "follow": True}
        self.apply(
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "ClusterLogs",
                "metadata": {"name": f"logs-{namespace}"},
                "spec": {
                    "selector": {"matchNamespaces": [namespace]},
                    "logs": [log],
                },
            }
        )

    def forward_port(self, namespace: str, pod_port: int, to_port: int) -> None:
        """Make kwok's kubelet server forward `pod_port` of every pod in `namespace` to
        127.0.0.1:`to_port` (pods/portforward through the real API server): a stand-in for
        the process that would listen in the pod."""
        forward = {"ports": [pod_port], "target": {"address": "127.0.0.1", "port": to_port}}
        self.apply(
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "ClusterPortForward",
                "metadata": {"name": f"forward-{namespace}"},
                "spec": {"selector": {"matchNamespaces": [namespace]}, "forwards": [forward]},
            }
        )

    def account_kubeconfig(self, account: str, namespace: str, path: Path) -> Path:
        """A kubeconfig at `path` that logs in with a token of ServiceAccount `account`, so a
        process using it has exactly that account's RBAC permissions (not admin's)."""
        admin = yaml.safe_load(self.kubeconfig.read_text())
        context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
        cluster = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
        token = self.kubectl("create", "token", account, "-n", namespace, "--duration", "2h").out
        server = dict(cluster["cluster"])
        if "certificate-authority" in server:  # inline it: the file may move with the cluster
            ca = Path(server.pop("certificate-authority")).read_bytes()
            server["certificate-authority-data"] = base64.b64encode(ca).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": server}],
            "users": [{"name": account, "user": {"token": token.strip()}}],
            "contexts": [{"name": "account", "context": {"cluster": "e2e", "user": account}}],
            "current-context": "account",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def wait_active(self, namespace: str, job: str, count: int = 2) -> None:
        """Until the Job controller reports `count` active pods of Job `job` (which may not
        exist yet: the operator creates it asynchronously)."""

        def active() -> bool:
            run = self.kubectl("get", "job", job, "-n", namespace, "-o", "json", check=False)
            return run.code == 0 and (json.loads(run.out)["status"].get("active") or 0) == count

        eventually(active, what=f"{count} active pods of Job {job}")

    def stop_apiserver(self) -> None:
        """Stop the kube-apiserver process (etcd, controllers and kwok keep running).

        Until start_apiserver, this holds hack/cluster.sh's port lock: a cluster created
        meanwhile (another xdist worker's) would otherwise take the freed port."""
        lock = open(_cluster_sh("port-lock"), "a")  # noqa: SIM115 (closed by start_apiserver)
        fcntl.flock(lock, fcntl.LOCK_EX)
        self._port_lock = lock
        _cluster_sh("apiserver-stop", str(self.kubeconfig))

    def start_apiserver(self) -> None:
        """Start it again with the same flags; returns once it is ready."""
        try:
            _cluster_sh("apiserver-start", str(self.kubeconfig))
        finally:
            if self._port_lock is not None:
                self._port_lock.close()  # closing releases the flock
                self._port_lock = None


def _cluster_sh(*args: str) -> str:
    proc = subprocess.run(
        ["bash", str(CLUSTER_SH), *args], capture_output=True, text=True, timeout=3600
    )
    if proc.returncode != 0:
        raise RuntimeError(f"hack/cluster.sh {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout.strip()


def _unavailable(reason: str) -> None:
    message = f"e2e: {reason}; install Go >= 1.26 and run `make cluster-build` to enable them"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    bin_dir = Path(_cluster_sh("bin"))
    existing = os.environ.get("TFLAUNCH_E2E_KUBECONFIG")
    if existing:
        yield ControlPlane(Path(existing), bin_dir, owned=False)
        return
    have_binaries = all((bin_dir / name).exists() for name in (*BINARIES, "kwok", "kwokctl"))
    if not have_binaries and shutil.which("go") is None:
        _unavailable("the control plane's binaries are not built and Go is not installed")
    kubeconfig = tmp_path_factory.mktemp("cluster") / "kubeconfig"
    _cluster_sh("up", str(kubeconfig))
    try:
        yield ControlPlane(kubeconfig, bin_dir, owned=True)
    finally:
        _cluster_sh("down", str(kubeconfig))


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, removed afterwards (without waiting)."""
    base = request.node.name.split("[")[0].removeprefix("test_").replace("_", "-")[:40]
    name = f"{base.strip('-')}-{uuid.uuid4().hex[:5]}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


def write_spec(
    path: Path,
    name: str,
    namespace: str,
    *,
    hooks: dict[str, str] | None = None,
    **spec: Any,
) -> Path:
    """A MultiWorkerJob spec file; `hooks` become pod annotations that steer kwok's Stages."""
    body: dict[str, Any] = {"image": "tflaunch-trainer:e2e", "workers": 2, **spec}
    if hooks:
        body["annotations"] = {**body.get("annotations", {}), **hooks}
    document = {
        "apiVersion": "tflaunch.dev/v1alpha1",
        "kind": "MultiWorkerJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }
    path.write_text(yaml.safe_dump(document))
    return path


def pod_hooks(
    run_for: str | None = None,
    exit_code: int | None = None,
    worker_exit: dict[int, int] | None = None,
    fail_once: bool = False,
) -> dict[str, str]:
    """Annotations that hack/kwok/stages.yaml turns into a pod's run time and exit code."""
    hooks: dict[str, str] = {}
    if run_for is not None:
        hooks["kwok.tflaunch.dev/run-for"] = run_for
    if exit_code is not None:
        hooks["kwok.tflaunch.dev/exit-code"] = str(exit_code)
    for index, code in (worker_exit or {}).items():
        hooks[f"kwok.tflaunch.dev/exit-code-{index}"] = str(code)
    if fail_once:
        hooks["kwok.tflaunch.dev/fail-once"] = "true"
    return hooks


def cri_log_line(text: str) -> str:
    """One line of a container log file as the kubelet stores it (what kwok serves)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{stamp} stdout F {text}\n"


def stop_process(process: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL if it has not ended after 30 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def eventually(
    check: Callable[[], Any], *, timeout: float = 60, interval: float = 0.5, what: str = ""
) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or check}: {last!r}")
