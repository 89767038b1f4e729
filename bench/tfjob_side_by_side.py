"""Kubeflow's TFJob example under training-operator v1.9.3 and under tflaunch, side by side
in one run on the real node of hack/node.sh (issue 36).

The job is tests/data/tfjob/multi_worker_tfjob.yaml (Kubeflow's own example: 2 workers, its
program with no restore, ten epochs of 70 steps), served and scheduled as
tests/node/test_tfjob_example.py does: its image from a registry on this machine named
docker.io's mirror, `nvidia.com/gpu: 2` patched into the node's status, the claim
`strategy-volume` a hostPath volume. Each system gets the same manifest in a namespace of
its own; training-operator runs as a local process (`cmd/training-operator.v1`, built from
the Go module proxy by hack/training-operator, `--enable-scheme=tfjob`, its own TFJob CRD),
tflaunch as `tflaunch submit FILE` (plain Jobs, no operator).

Cases (`unchanged` `--repeats` times, a kill once: what happens, not a median):
- `unchanged`: the manifest as it is (`restartPolicy: Never`). Measured from `kubectl
  apply` / `tflaunch submit`: pods created, every worker Running, `Epoch 1/10` in worker 0's
  log (the program past its strategy, model and dataset: training starts), its first epoch's
  end, the job's end. Each pod's TF_CONFIG as its container got it (crictl's OCI spec),
  compared key by key between the two systems.
- `exitcode-kill`: `restartPolicy: ExitCode`, the policy that retries; once worker 0 has
  finished epoch 2, worker 1's container is stopped through crictl (SIGKILL, exit 137), and
  what each system does is recorded for up to `--watch` seconds: pods deleted and created,
  containers restarted, worker 0's end and last error line, the job's state, training again.
- `onfailure-kill` (training-operator only; tflaunch reads OnFailure as ExitCode): the
  same with `restartPolicy: OnFailure` (the kubelet restarts a failed container in its pod).
- `command-kill` (tflaunch only; training-operator runs it as `exitcode-kill`):
  `exitcode-kill` with the container's `command` written (Kubeflow's ENTRYPOINT as the
  command): the worker wrapper then runs the program, so the group restarts in place. No
  GPU limit: the wrapper checks that a worker sees the GPUs it asked for, and this node's
  are patched into its status, not real.

Not a `bench_*.py` (it needs root, the node's binaries, the trainer and example images and
Go, and takes about 40 minutes). Run it as root:

    .venv/bin/python bench/tfjob_side_by_side.py [--repeats 2] [--cases unchanged,...]
        [--write-docs]

It takes ~/.cache/tflaunch/node.lock as tests/node does.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import ROOT, load, machine
from bench.docs_section import publish
from bench.node_pods import Cluster, sh, shared_claim, timestamp, until
from launcher.local.runner import free_ports
from tests.node.conftest import NODE_NAME
from tests.node.registry import mirrored

VERSION = "v1.9.3"
MANIFEST = ROOT / "tests" / "data" / "tfjob" / "multi_worker_tfjob.yaml"
REPOSITORY = "kubeflow/tf-multi-worker-strategy"
ENTRYPOINT = [
    "python",
    "/multi_worker_strategy-with-keras.py",
    "--saved_model_dir",
    "/train/saved_model/",
    "--checkpoint_dir",
    "/train/checkpoint",
]
"""The example image's ENTRYPOINT (tests/data/tfjob/Dockerfile), for `command-kill`."""
GPU = "nvidia.com/gpu"
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
"""Where training-operator's certificate rotator expects its Secret mounted."""
SYSTEMS = ("training-operator", "tflaunch")
CASES = {
    "unchanged": SYSTEMS,
    "exitcode-kill": SYSTEMS,
    "onfailure-kill": ("training-operator",),
    "command-kill": ("tflaunch",),
}
"""Each case's systems: training-operator runs `command-kill` as `exitcode-kill` (the command
is the image's ENTRYPOINT), and tflaunch treats OnFailure as ExitCode (a group restart)."""
EPOCH = re.compile(r"^Epoch (\d+)/10$")
EPOCH_END = re.compile(r"^Learning rate for epoch (\d+) is")
ERROR = re.compile(r"^[\w.]*(Error|Exception): ")
"""A Python exception's last line (TensorFlow's own log lines are left out)."""


MODULE = "github.com/kubeflow/training-operator"
HACK = ROOT / "hack" / "training-operator"


def operator_binary() -> Path:
    """training-operator v1.9.3, built once from the Go module proxy into the cache."""
    binary = Path(sh("cluster.sh", "port-lock")).parent / f"training-operator-{VERSION}" / "bin"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        build = ["go", "build", "-o", str(binary), f"{MODULE}/cmd/training-operator.v1"]
        subprocess.run(build, cwd=HACK, check=True)
    return binary


def module_file(relative: str) -> Path:
    """A file of training-operator's module (its CRD), from the Go module cache."""
    where = ["go", "list", "-m", "-f", "{{.Dir}}", MODULE]
    found = subprocess.run(where, cwd=HACK, capture_output=True, text=True, check=True)
    return Path(found.stdout.strip()) / relative


@contextlib.contextmanager
def training_operator(cluster: Cluster, log: Path) -> Iterator[None]:
    """training-operator serving TFJobs cluster-wide as a local process, as its Deployment
    runs it bar the webhook: the CRD from its module, its namespace and the (empty) Secret
    its certificate rotator fills; no ValidatingWebhookConfiguration, so no admission call
    reaches a webhook no Service fronts here."""
    binary = operator_binary()
    crd = module_file("manifests/base/crds/kubeflow.org_tfjobs.yaml")
    cluster.kubectl("apply", "--server-side", "-f", str(crd))

    def established() -> bool | None:
        found = json.loads(cluster.kubectl("get", "crd/tfjobs.kubeflow.org", "-o", "json"))
        conditions = found.get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions) or None

    until(established, "the TFJob CRD established", timeout=60)
    cluster.kubectl("create", "namespace", "kubeflow")
    cluster.kubectl(
        "create", "secret", "generic", "training-operator-webhook-cert", "-n", "kubeflow"
    )
    with open(log, "w") as out:
        process = subprocess.Popen(
            [
                str(binary),
                "--enable-scheme=tfjob",
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
                f"--webhook-server-port={free_ports(1)[0]}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=cluster.env,
        )
        try:
            mount_certificate(cluster)
            until(
                lambda: controller_started(log.read_text()) or None,
                "training-operator's TFJob controller",
                timeout=120,
            )
            yield
        finally:
            process.terminate()
            process.wait(timeout=30)


def controller_started(log: str) -> bool:
    return any(
        "Starting workers" in line and "tfjob-controller" in line for line in log.splitlines()
    )


def mount_certificate(cluster: Cluster) -> None:
    """Write the serving certificate the rotator put in its Secret where the Deployment
    mounts that Secret: the rotator waits for the files before it starts the controllers."""

    def filled() -> dict[str, str] | None:
        secret = json.loads(
            cluster.kubectl(
                "get", "secret", "training-operator-webhook-cert", "-n", "kubeflow", "-o", "json"
            )
        )
        data: dict[str, str] = secret.get("data") or {}
        return data if "tls.crt" in data and "tls.key" in data else None

    data = until(filled, "the rotator's certificate", timeout=60)
    CERT_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        (CERT_DIR / name).write_bytes(base64.b64decode(data[name]))


@contextlib.contextmanager
def gpu_node(cluster: Cluster, node: str) -> Iterator[None]:
    """The real node as the one schedulable node, advertising 2 GPUs (tests/node's way)."""
    others = [
        n for n in cluster.kubectl("get", "nodes", "-o", "name").split() if n != f"node/{node}"
    ]
    cluster.kubectl("cordon", *others)
    cluster.kubectl(
        "patch",
        "node",
        node,
        "--type=json",
        "-p",
        json.dumps([{"op": "remove", "path": "/spec/taints"}]),
    )
    gpus = {"capacity": {GPU: "2"}, "allocatable": {GPU: "2"}}
    cluster.kubectl(
        "patch",
        "node",
        node,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": gpus}),
    )
    yield


def manifest(case: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    worker = document["spec"]["tfReplicaSpecs"]["Worker"]
    if case in ("exitcode-kill", "command-kill"):
        worker["restartPolicy"] = "ExitCode"
    if case == "onfailure-kill":
        worker["restartPolicy"] = "OnFailure"
    if case == "command-kill":
        container = worker["template"]["spec"]["containers"][0]
        container["command"] = list(ENTRYPOINT)
        # The wrapper checks the GPUs a worker was promised (`--expect-gpus`), and this
        # node's are patched in, not real: it would end the worker at once (exit 78).
        del container["resources"]["limits"][GPU]
    return document


class Watch:
    """Every pod of a namespace as seen by polling: its lifetime, its containers' restarts
    and ends, and the lines of its log with containerd's timestamps (kept after the pod is
    gone)."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.pods: dict[str, dict[str, Any]] = {}
        self.lines: dict[tuple[str, int], list[tuple[float, str]]] = {}
        self.events: list[tuple[float, str]] = []

    def poll(self) -> list[dict[str, Any]]:
        now = time.time()
        current = self.cluster.pods(self.namespace)
        uids = set()
        for pod in current:
            uid = pod["metadata"]["uid"]
            uids.add(uid)
            name = pod["metadata"]["name"]
            if uid not in self.pods:
                created = timestamp(pod["metadata"]["creationTimestamp"])
                self.events.append((created, f"pod {name} created"))
            known = self.pods.get(uid, {})
            for status in pod["status"].get("containerStatuses") or []:
                count = int(status.get("restartCount", 0))
                if count > known.get("restarts", 0):
                    self.events.append((now, f"{name}: container restarted in its pod ({count})"))
                ended = status["state"].get("terminated")
                if ended and not known.get("ended"):
                    self.events.append(
                        (
                            now,
                            f"{name}: container ended, exit {ended.get('exitCode')}"
                            f" ({ended.get('reason')})",
                        )
                    )
                known = {**known, "restarts": count, "ended": bool(ended)}
            if pod["status"].get("phase") == "Running" and "running" not in known:
                ready = all(
                    "running" in s["state"]
                    for s in pod["status"].get("containerStatuses") or [{"state": {}}]
                )
                if ready:
                    known["running"] = now
            self.pods[uid] = {**known, "name": name, "pod": pod, "index": worker_index(pod)}
            self._read_log(uid, name, known.get("restarts", 0))
        for uid, known in self.pods.items():
            if uid not in uids and not known.get("gone"):
                known["gone"] = now
                self.events.append((now, f"pod {known['name']} deleted"))
        return current

    def _read_log(self, uid: str, name: str, restarts: int) -> None:
        """The log of the pod's current container (one list per container instance: a
        container restarted in its pod starts a new log)."""
        try:
            text = self.cluster.kubectl("logs", "--timestamps", name, "-n", self.namespace)
        except RuntimeError:
            return
        lines = []
        for line in text.splitlines():
            stamp, _, rest = line.partition(" ")
            with contextlib.suppress(ValueError):
                lines.append((timestamp(stamp), rest.strip()))
        if len(lines) >= len(self.lines.get((uid, restarts), [])):
            self.lines[(uid, restarts)] = lines

    def first(self, pattern: re.Pattern[str], worker: int, after: float = 0) -> float | None:
        """When a line matching `pattern` first appeared after `after` in a log of worker
        `worker`'s pods."""
        times = [
            at
            for (uid, _), lines in self.lines.items()
            if self.pods[uid]["index"] == worker
            for at, text in lines
            if at > after and pattern.search(text)
        ]
        return min(times) if times else None


def worker_index(pod: dict[str, Any]) -> int:
    """The worker's index: training-operator's replica-index label, or the completion index
    of tflaunch's indexed Job."""
    metadata = pod["metadata"]
    found = metadata.get("labels", {}).get("training.kubeflow.org/replica-index")
    found = found or metadata.get("annotations", {}).get("batch.kubernetes.io/job-completion-index")
    return int(found) if found is not None else -1


def tf_configs(cluster: Cluster, watch: Watch) -> dict[str, dict[str, Any]]:
    """Each worker's TF_CONFIG as containerd gave its container, by index."""
    configs = {}
    for known in watch.pods.values():
        name = known["name"]
        containers = sh(
            "node.sh", "crictl", "ps", "-a", "-q", "--label", f"io.kubernetes.pod.name={name}"
        ).split()
        if not containers:
            continue
        spec = json.loads(sh("node.sh", "crictl", "inspect", containers[0]))
        env = dict(e.split("=", 1) for e in spec["info"]["runtimeSpec"]["process"]["env"])
        config = json.loads(env["TF_CONFIG"])
        configs[str(config["task"]["index"])] = config
    return configs


def config_differences(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """What differs between two pods' TF_CONFIG, key by key (host names compared apart:
    the port and the position of each host are compared, the name is not)."""
    found = []
    for key in sorted(set(ours) | set(theirs)):
        if key == "cluster":
            continue
        if ours.get(key) != theirs.get(key):
            found.append(f"{key}: {theirs.get(key)!r} vs {ours.get(key)!r}")
    clusters = ours.get("cluster", {}), theirs.get("cluster", {})
    if set(clusters[0]) != set(clusters[1]):
        found.append(f"cluster keys: {sorted(clusters[1])} vs {sorted(clusters[0])}")
    for role in set(clusters[0]) & set(clusters[1]):
        ports = [[h.rsplit(":", 1)[1] for h in c[role]] for c in clusters]
        if ports[0] != ports[1] or len(clusters[0][role]) != len(clusters[1][role]):
            found.append(f"cluster.{role}: {clusters[1][role]} vs {clusters[0][role]}")
    return found


def job_state(cluster: Cluster, system: str, namespace: str) -> str | None:
    if system == "training-operator":
        found = json.loads(
            cluster.kubectl("get", "tfjob", "multi-worker", "-n", namespace, "-o", "json")
        )
        conditions = (found.get("status") or {}).get("conditions") or []
        true = [c["type"] for c in conditions if c["status"] == "True"]
        return true[-1] if true else None
    status = tflaunch_status(cluster, namespace)
    return str(status["state"]) if status else None


def tflaunch_status(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    """`tflaunch status -o json`'s status (docs/output-schema.json), None before the Jobs."""
    status = cluster.tflaunch("status", "multi-worker", "-n", namespace, "-o", "json")
    if status.returncode != 0:
        return None
    found: dict[str, Any] = json.loads(status.stdout)["status"]
    return found


def run_case(
    cluster: Cluster, system: str, case: str, namespace: str, tmp: Path, watch_for: float
) -> dict[str, Any]:
    cluster.kubectl("create", "namespace", namespace)
    shared_claim(cluster, namespace, "strategy-volume")
    path = tmp / f"{namespace}.yaml"
    path.write_text(yaml.safe_dump(manifest(case)))
    watch = Watch(cluster, namespace)
    started = time.time()
    if system == "training-operator":
        cluster.kubectl("apply", "-n", namespace, "-f", str(path))
    else:
        submitted = cluster.tflaunch("submit", str(path), "-n", namespace)
        if submitted.returncode != 0:
            raise SystemExit(f"tflaunch submit: {submitted.stderr}")
    result: dict[str, Any] = {"system": system, "case": case, "load": load()}
    states: list[tuple[float, str]] = []

    def progress(stop: float) -> bool:
        watch.poll()
        state = job_state(cluster, system, namespace)
        if state and (not states or states[-1][1] != state):
            states.append((time.time(), state))
        return state in ("Succeeded", "Failed") or time.time() > stop

    killed = None
    if case.endswith("-kill"):
        second = re.compile(r"^Learning rate for epoch 2 is")
        until(
            lambda: (progress(float("inf")) or watch.first(second, 0)) or None,
            "worker 0's second epoch",
            timeout=900,
        )
        victim = next(k["name"] for k in watch.pods.values() if k["index"] == 1)
        container = sh(
            "node.sh", "crictl", "ps", "-q", "--label", f"io.kubernetes.pod.name={victim}"
        )
        if not container:  # the job ended before its second epoch: what it said
            lines = [text for lines in watch.lines.values() for _, text in lines]
            raise SystemExit(f"{system}/{case} ended before the kill:\n" + "\n".join(lines[-40:]))
        killed = time.time()
        sh("node.sh", "crictl", "stop", "--timeout", "0", container)
        watch.events.append((killed, f"{victim}: container stopped by crictl (SIGKILL)"))
        until(lambda: progress(killed + watch_for) or None, "the end", timeout=watch_for + 60)
    else:
        until(lambda: progress(started + 900) or None, "the end", timeout=960)
    watch.poll()
    origin = killed or started
    created = min(timestamp(k["pod"]["metadata"]["creationTimestamp"]) for k in watch.pods.values())
    result["times"] = {
        "created": created - started,
        "running": max(k.get("running", float("nan")) for k in watch.pods.values()) - started,
        "training": (watch.first(EPOCH, 0) or float("nan")) - started,
        "first_epoch": (watch.first(EPOCH_END, 0) or float("nan")) - started,
        "end": (states[-1][0] if states else float("nan")) - started,
    }
    if killed:
        again = [watch.first(EPOCH, worker, after=killed) for worker in (0, 1)]
        seen = [at for at in again if at is not None]
        result["training_again"] = max(seen) - killed if len(seen) == len(again) else None
        result["timeline"] = [
            (round(at - origin, 1), what) for at, what in sorted(watch.events) if at >= origin
        ] + [(round(at - origin, 1), f"job: {state}") for at, state in states if at >= origin]
        result["timeline"].sort()
        result["errors"] = [
            f"{watch.pods[uid]['name']}: {text[:160]}"
            for (uid, _), lines in watch.lines.items()
            for at, text in lines
            if at > killed and ERROR.search(text)
        ][:6]
    result["state"] = states[-1][1] if states else None
    if system == "tflaunch":
        status = tflaunch_status(cluster, namespace) or {}
        result["status"] = {
            k: status.get(k)
            for k in ("condition", "restarts", "restartsInPlace", "lastRestartInPlace")
        }
    result["pods"] = len(watch.pods)
    result["tf_config"] = tf_configs(cluster, watch) if case == "unchanged" else {}
    # Gone before the next run: a failed TFJob keeps its pods (cleanPodPolicy None), which
    # would hold the node's GPUs.
    cluster.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=120s")
    return result


def markdown(results: dict[str, Any]) -> str:
    runs = results["runs"]
    out = [
        f"{machine()}; training-operator {VERSION} (local process) and tflaunch "
        f"{results['commit']} (`tflaunch submit`, no operator) on the same real node, "
        "the same Kubeflow example, one after the other in one run.",
        "",
        "**Kubeflow's example unchanged** (`restartPolicy: Never`), seconds from `kubectl "
        "apply` / `tflaunch submit` (pods created: the API's whole seconds); median of the "
        "runs, each run in brackets:",
        "",
        "| | pods created | all Running | `Epoch 1/10` (training starts) | first epoch done "
        "| job ended | state |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for system in SYSTEMS:
        mine = [r for r in runs if r["system"] == system and r["case"] == "unchanged"]
        if not mine:
            continue
        cells = []
        for key in ("created", "running", "training", "first_epoch", "end"):
            values = [r["times"][key] for r in mine]
            each = ", ".join(f"{v:.1f}" for v in values)
            cells.append(f"{statistics.median(values):.1f} ({each})")
        states = ", ".join(sorted({str(r["state"]) for r in mine}))
        out.append(f"| {system} | " + " | ".join(cells) + f" | {states} |")
    loads = [r["load"] for r in runs]
    out += ["", f"Load averages (1/5/15 min) before each run: {', '.join(loads)}.", ""]
    pairs = [r for r in runs if r["case"] == "unchanged" and r["tf_config"]]
    theirs = next((r for r in pairs if r["system"] == "training-operator"), None)
    ours = next((r for r in pairs if r["system"] == "tflaunch"), None)
    if theirs and ours:
        out += [
            "**Each pod's TF_CONFIG** (as containerd gave the container), worker by worker:",
            "",
        ]
        for index in sorted(theirs["tf_config"]):
            differences = config_differences(ours["tf_config"][index], theirs["tf_config"][index])
            words = "; ".join(differences) if differences else "the same bar the host names"
            out.append(f"- worker {index}: {words}.")
            out.append(f"  - training-operator: `{json.dumps(theirs['tf_config'][index])}`")
            out.append(f"  - tflaunch: `{json.dumps(ours['tf_config'][index])}`")
        out.append("")
    for case in list(CASES)[1:]:
        killed = [r for r in runs if r["case"] == case]
        if not killed:
            continue
        out += [
            f"**`{case}`**: worker 1's container stopped (SIGKILL) after epoch 2; "
            "seconds from the stop:",
            "",
        ]
        for run in killed:
            again = run["training_again"]
            words = (
                f"both workers training again after {again:.1f} s"
                if again
                else ("no worker trained again")
            )
            out.append(
                f"- {run['system']}: ended **{run['state']}**, {words}, {run['pods']} pods in all:"
            )
            out += [f"  - {at:+.1f} {what}" for at, what in run["timeline"][:14]]
            out += [f"  - error line: `{line}`" for line in run["errors"][:2]]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--watch", type=float, default=300, help="seconds after a kill")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    cases = args.cases.split(",")
    operator_binary()
    layout = Path(sh("images.sh", "build", "tfjob-example").split()[-1])
    cache = Path(sh("cluster.sh", "port-lock")).parent
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    results: dict[str, Any] = {"commit": commit, "runs": []}
    with tempfile.TemporaryDirectory() as tmp, open(cache / "node.lock", "a") as lock:
        print("waiting for the node lock ...", flush=True)
        fcntl.flock(lock, fcntl.LOCK_EX)
        kubeconfig = Path(tmp) / "kubeconfig"
        sh("node.sh", "down")
        sh("cluster.sh", "up", str(kubeconfig))
        try:
            sh("node.sh", "up", str(kubeconfig), sh("node.sh", "smoke-image"))
            cluster = Cluster(kubeconfig)
            certs_d = Path(sh("node.sh", "state")) / "certs.d"
            node = NODE_NAME
            with (
                mirrored(
                    certs_d, "docker.io", "https://registry-1.docker.io", {REPOSITORY: layout}
                ),
                gpu_node(cluster, node),
                training_operator(cluster, Path(tmp) / "training-operator.log"),
            ):
                # Pulled once before any run, so that no system's first run pays for it.
                sh("node.sh", "crictl", "pull", f"docker.io/{REPOSITORY}:latest")
                for repeat in range(args.repeats):
                    for case in cases:
                        if case != "unchanged" and repeat > 0:
                            continue  # one run of each kill: what happens, not a median
                        for system in CASES[case]:
                            namespace = f"{system[:2]}-{case.split('-')[0]}-{repeat}"
                            run = run_case(cluster, system, case, namespace, Path(tmp), args.watch)
                            print(json.dumps(run, default=str), flush=True)
                            results["runs"].append(run)
        finally:
            try:
                sh("node.sh", "down")
            finally:
                sh("cluster.sh", "down", str(kubeconfig))
    (Path(tempfile.gettempdir()) / "tfjob_side_by_side.json").write_text(
        json.dumps(results, indent=1, default=str)
    )
    publish(
        "tfjob",
        "Kubeflow's TFJob example: training-operator v1.9.3 and tflaunch "
        "(bench/tfjob_side_by_side.py)",
        markdown(results),
        write=args.write_docs,
    )


if __name__ == "__main__":
    os.umask(0o022)
    main()
