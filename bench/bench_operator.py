"""The operator with 10 -> 50 -> 100 MultiWorkerJobs of 8 workers on the real control plane.

hack/cluster.sh starts kube-apiserver, etcd, controller-manager, scheduler and kwok (no
containers: kwok marks scheduled pods Running); `tflaunch operator -A` runs as a local
process (as tests/e2e/test_operator.py runs it) with its /metrics on loopback. Jobs are
added in batches; for each batch:

* seconds from `kubectl apply` until every new job's children exist (its Job and its
  Service) and its status has a phase;
* API requests per new job, counted by the API server (apiserver_request_total) on
  multiworkerjobs (status included), jobs, services and networkpolicies, minus
  kubectl's own create of each MultiWorkerJob;
* reconcile duration p50 / p99 over the batch (the operator's histogram, bucket bounds);
* reconciles per job while nothing changes for 20 s (a storm would show here);
* the operator's resident memory (process_resident_memory_bytes).

Run: .venv/bin/python bench/bench_operator.py [--write-docs]   (BENCH=full: up to 200 jobs)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_cluster import CLUSTER_SH, Cluster, sh
from bench.common import FULL, ROOT, load, machine
from bench.docs_section import publish

NAMESPACE = "default"
WORKERS = 8
KINDS = {"multiworkerjobs", "jobs", "services", "networkpolicies"}
COUNTED_SUBRESOURCES = {"multiworkerjobs/status"}
"""jobs/status is the Job controller's; events are excluded (the Job controller posts one per
pod it creates, indistinguishable by resource from the operator's)."""
_METRIC = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$")


def requests(cluster: Cluster) -> dict[tuple[str, str, str], float]:
    """(verb, resource[/subresource], dry_run) -> count on the kinds the operator touches."""
    counts: dict[tuple[str, str, str], float] = {}
    for line in cluster.k("get", "--raw", "/metrics").splitlines():
        match = _METRIC.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels.get("resource") in KINDS:
            resource = labels["resource"] + (
                f"/{labels['subresource']}" if labels.get("subresource") else ""
            )
            if labels.get("subresource") and resource not in COUNTED_SUBRESOURCES:
                continue
            key = (labels["verb"], resource, labels.get("dry_run", ""))
            counts[key] = counts.get(key, 0) + float(match["value"])
    return counts


class Operator:
    def __init__(self, kubeconfig: Path, log: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/metrics"
        self._log = log.open("w")
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["PYTHONPATH"] = str(ROOT)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "launcher", "operator", "-A", "--liveness", "",
             "--metrics-address", f"127.0.0.1:{port}", "--kubeconfig", str(kubeconfig)],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
        )  # fmt: skip

    def metrics(self) -> dict[str, float]:
        """name{labels} -> value, every sample of the operator's /metrics."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(self.url, timeout=10) as response:
            text = response.read().decode()
        samples: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}"] = float(sample.value)
        return samples

    def wait_ready(self) -> None:
        for _ in range(600):
            try:
                self.metrics()
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("the operator never served /metrics")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


def quantile(before: dict[str, float], after: dict[str, float], q: float) -> str:
    """The upper bound of the reconcile-duration bucket holding quantile q of the batch."""
    prefix = "tflaunch_reconcile_duration_seconds_bucket{le="
    buckets = sorted(
        (float(key[len(prefix) : -1]), after[key] - before.get(key, 0.0))
        for key in after
        if key.startswith(prefix)
    )
    total = buckets[-1][1] if buckets else 0
    if not total:
        return "-"
    for bound, count in buckets:
        if count >= q * total:
            return f"<= {bound * 1000:.0f} ms" if bound != float("inf") else "> 30 s"
    return "-"


def mwj(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "tflaunch.dev/v1alpha1",
        "kind": "MultiWorkerJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "image": "tflaunch-trainer:bench",
            "workers": WORKERS,
            "trainer": {"globalBatchSize": WORKERS * 8},
            "annotations": {"kwok.tflaunch.dev/run-for": "forever"},
        },
    }


def children_ready(cluster: Cluster, names: set[str]) -> bool:
    jobs = json.loads(cluster.k("get", "jobs", "-n", NAMESPACE, "-o", "json"))["items"]
    services = json.loads(cluster.k("get", "services", "-n", NAMESPACE, "-o", "json"))["items"]
    owners = lambda items: {  # noqa: E731
        (i["metadata"].get("labels") or {}).get("tflaunch.dev/job-name") for i in items
    }
    mwjs = json.loads(cluster.k("get", "mwj", "-n", NAMESPACE, "-o", "json"))["items"]
    phased = {m["metadata"]["name"] for m in mwjs if (m.get("status") or {}).get("phase")}
    return names <= owners(jobs) and names <= owners(services) and names <= phased


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[10, 50, 100, 200] if FULL
                        else [10, 50, 100])  # fmt: skip
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(prefix="tflaunch-operator-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        sh("bash", str(CLUSTER_SH), "up", str(kubeconfig))
        operator = None
        try:
            cluster = Cluster(kubeconfig)
            nodes = [
                {"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": f"op-{i}", "annotations": {"kwok.x-k8s.io/node": "fake"},
                              "labels": {"type": "kwok"}},
                 "status": {"allocatable": {"cpu": "1000", "memory": "4Ti", "pods": "250"},
                            "capacity": {"cpu": "1000", "memory": "4Ti", "pods": "250"}}}
                for i in range(max(args.steps) * WORKERS // 250 + 1)
            ]  # fmt: skip
            cluster.k("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                            "items": nodes}))  # fmt: skip
            cluster.k("apply", "-f", str(ROOT / "manifests/operator/crd.yaml"))
            cluster.k("wait", "--for=condition=Established",
                      "crd/multiworkerjobs.tflaunch.dev", "--timeout=60s")  # fmt: skip
            operator = Operator(kubeconfig, Path(tmp) / "operator.log")
            operator.wait_ready()
            existing = 0
            for total in args.steps:
                names = {f"op{i:03d}" for i in range(existing, total)}
                before_requests, before_metrics = requests(cluster), operator.metrics()
                started = time.perf_counter()
                cluster.k("apply", "-f", "-", stdin=json.dumps(
                    {"apiVersion": "v1", "kind": "List", "items": [mwj(n) for n in sorted(names)]}
                ))  # fmt: skip
                while not children_ready(cluster, names):
                    time.sleep(0.5)
                ready = time.perf_counter() - started
                after_requests, after_metrics = requests(cluster), operator.metrics()
                delta = {k: v - before_requests.get(k, 0) for k, v in after_requests.items()}
                kubectl_creates = len(names)
                operator_calls = sum(delta.values()) - kubectl_creates - len(names)  # + its GETs
                writes = sum(
                    v for (verb, _, dry), v in delta.items()
                    if not dry and verb in {"POST", "PUT", "PATCH", "DELETE", "APPLY"}
                ) - kubectl_creates  # fmt: skip
                count = "tflaunch_reconcile_duration_seconds_count{}"
                time.sleep(args.idle)
                idle = operator.metrics()
                rows.append({
                    "jobs": total,
                    "new": len(names),
                    "ready": ready,
                    "requests_per_job": operator_calls / len(names),
                    "writes_per_job": writes / len(names),
                    "p50": quantile(before_metrics, after_metrics, 0.5),
                    "p99": quantile(before_metrics, after_metrics, 0.99),
                    "reconciles_per_job": (after_metrics[count] - before_metrics.get(count, 0))
                    / len(names),
                    "idle_reconciles_per_job": (idle[count] - after_metrics[count]) / total
                    * 60 / args.idle,
                    "rss": idle["process_resident_memory_bytes{}"] / 2**20,
                    "load": load(),
                })  # fmt: skip
                print(rows[-1], flush=True)
                existing = total
        finally:
            if operator:
                operator.stop()
            sh("bash", str(CLUSTER_SH), "down", str(kubeconfig), check=False)

    lines = [
        f"Real control plane (hack/cluster.sh, kwok nodes), `tflaunch operator -A` as a local "
        f"process, MultiWorkerJobs of {WORKERS} workers added in batches. {machine()}.",
        "",
        "| jobs (new in batch) | apply -> all children + status (s) | API requests per new job "
        "| writes per new job | reconciles per new job | reconcile p50 / p99 | reconciles per job "
        "per minute, idle | operator RSS (MiB) | load |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['jobs']} ({r['new']}) | {r['ready']:.1f} | {r['requests_per_job']:.1f} | "
            f"{r['writes_per_job']:.1f} | {r['reconciles_per_job']:.1f} | {r['p50']} / "
            f"{r['p99']} | {r['idle_reconciles_per_job']:.2f} | {r['rss']:.0f} | {r['load']} |"
        )
    lines += [
        "",
        "Requests are the API server's count on multiworkerjobs (and their status), jobs, "
        "services and networkpolicies during the batch (watches included), less kubectl's GET "
        "and create of each MultiWorkerJob; jobs/status (the Job controller's) and events (the "
        "Job controller posts one per pod) are left out.",
    ]
    text = "\n".join(lines)
    heading = "Operator at scale (bench/bench_operator.py)"
    publish("operator", heading, text, write=args.write_docs)


if __name__ == "__main__":
    main()
