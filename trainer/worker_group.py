"""TF_CONFIG read as the worker group it describes: every member's address, in the order
MultiWorkerMirroredStrategy numbers them, and this worker's place in it. Checked before the
strategy exists (`trainer.preflight`), so that a bad TF_CONFIG is one message naming the
field, not a TensorFlow stack trace.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from typing import Any

from launcher.core import contract
from trainer.errors import ConfigError

WORKER_JOB = "worker"
GROUP_JOBS = contract.TF_CONFIG_GROUP_JOBS


@dataclasses.dataclass(frozen=True)
class WorkerGroup:
    """This worker's view of the group, from TF_CONFIG."""

    workers: tuple[str, ...]
    """"host:port" of every worker, in task-index order; empty without TF_CONFIG."""
    index: int
    """This worker's task index; worker 0 is the chief."""

    @property
    def num_workers(self) -> int:
        return max(1, len(self.workers))

    @property
    def is_multi_worker(self) -> bool:
        return len(self.workers) > 1

    @property
    def is_chief(self) -> bool:
        return self.index == 0

    @property
    def address(self) -> str | None:
        """This worker's own "host:port", None without TF_CONFIG."""
        return self.workers[self.index] if self.workers else None

    @property
    def peers(self) -> tuple[str, ...]:
        """Every other worker's "host:port"."""
        return tuple(w for i, w in enumerate(self.workers) if i != self.index)

    @property
    def label(self) -> str:
        """The log prefix, e.g. "worker 0/2"."""
        return f"worker {self.index}/{self.num_workers}"

    @property
    def workers_on_this_host(self) -> int:
        """Workers whose TF_CONFIG host is this worker's (every loopback name counts as one
        host: `tflaunch local`'s workers share this machine's CPUs); 1 without TF_CONFIG."""
        return len(self._indexes_on_this_host()) or 1

    @property
    def rank_on_this_host(self) -> int:
        """This worker's place among `workers_on_this_host`, in task-index order (0-based)."""
        return sum(1 for index in self._indexes_on_this_host() if index < self.index)

    def _indexes_on_this_host(self) -> list[int]:
        if self.address is None:
            return []

        def host_key(address: str) -> str:
            host = split_address(address)[0]
            return "loopback" if is_loopback(host) else host

        own = host_key(self.address)
        return [i for i, worker in enumerate(self.workers) if host_key(worker) == own]


SINGLE_WORKER = WorkerGroup(workers=(), index=0)


def is_loopback(host: str) -> bool:
    """`localhost`, 127.0.0.0/8 or ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_address(address: str) -> tuple[str, int]:
    """Split "host:port" (or "[v6]:port") and check the port.

    Raises:
        ValueError: with a message naming what is wrong.
    """
    host, sep, port_text = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host:
        raise ValueError(f"{address!r} is not host:port")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{address!r} has no valid port (1-65535)")
    return host, int(port_text)


def _field(mapping: Any, key: str, where: str) -> Any:
    """`mapping[key]`, or a ConfigError naming the missing TF_CONFIG field."""
    if not isinstance(mapping, dict):
        raise ConfigError(f"TF_CONFIG: {where} must be a JSON object, got {mapping!r}")
    if key not in mapping:
        raise ConfigError(f"TF_CONFIG: {where}.{key} is missing")
    return mapping[key]


def _worker_list(cluster: Any) -> tuple[str, ...]:
    """Validate TF_CONFIG.cluster and return the group's addresses in group order (a chief,
    then the workers: `contract.TF_CONFIG_GROUP_JOBS`)."""
    if isinstance(cluster, dict):
        others = sorted(set(cluster) - set(GROUP_JOBS))
        if others:
            raise ConfigError(
                f"TF_CONFIG: cluster has job(s) {others}; the trainer supports only "
                f"{', '.join(repr(j) for j in GROUP_JOBS)} (one chief, then the workers), "
                "which is what tflaunch renders"
            )
        chiefs = [j for j in GROUP_JOBS[:-1] if j in cluster]
        if len(chiefs) > 1 or any(len(cluster[j] or []) > 1 for j in chiefs):
            raise ConfigError("TF_CONFIG: the cluster must have at most one chief (or master)")
        if chiefs and WORKER_JOB not in cluster:
            return _addresses(cluster, chiefs[0])
        if chiefs:
            return _addresses(cluster, chiefs[0]) + _addresses(cluster, WORKER_JOB)
    return _addresses(cluster, WORKER_JOB)


def _addresses(cluster: Any, job: str) -> tuple[str, ...]:
    workers = _field(cluster, job, "cluster")
    if not isinstance(workers, list) or not workers:
        raise ConfigError(f"TF_CONFIG: cluster.{job} must be a non-empty list of host:port")
    seen: set[str] = set()
    for position, address in enumerate(workers):
        if not isinstance(address, str):
            raise ConfigError(f"TF_CONFIG: cluster.{job}[{position}] is not a string")
        try:
            split_address(address)
        except ValueError as e:
            raise ConfigError(f"TF_CONFIG: cluster.{job}[{position}]: {e}") from None
        if address in seen:
            raise ConfigError(
                f"TF_CONFIG: cluster.{job} lists {address!r} twice; every worker needs "
                "its own host:port"
            )
        seen.add(address)
    return tuple(workers)


def _task_index(task: Any, cluster: dict[str, Any]) -> int:
    """Validate TF_CONFIG.task and return its index in the group (a chief is 0, worker i is
    i + 1 after a chief)."""
    task_type = _field(task, "type", "task")
    if task_type not in cluster or task_type not in GROUP_JOBS:
        present = [j for j in GROUP_JOBS if j in cluster]
        raise ConfigError(
            f"TF_CONFIG: task.type is {task_type!r}; the cluster has "
            f"{', '.join(repr(j) for j in present)}"
        )
    index = _field(task, "index", "task")
    if isinstance(index, bool) or not isinstance(index, int):
        raise ConfigError(f"TF_CONFIG: task.index must be an integer, got {index!r}")
    size = len(cluster[task_type])
    if not 0 <= index < size:
        raise ConfigError(
            f"TF_CONFIG: task.index {index} is out of range for {size} task(s) "
            f"in cluster.{task_type} (valid: 0..{size - 1})"
        )
    before = GROUP_JOBS[: GROUP_JOBS.index(task_type)]
    return index + sum(len(cluster.get(j) or []) for j in before)


def parse_tf_config(raw: str | None) -> WorkerGroup:
    """Parse and check TF_CONFIG; absent or empty means a single worker.

    Raises:
        ConfigError: naming the TF_CONFIG field at fault.
    """
    if raw is None or not raw.strip():
        return SINGLE_WORKER
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"TF_CONFIG is not valid JSON ({e}): {raw[:200]!r}") from None
    cluster = _field(config, "cluster", "TF_CONFIG")
    workers = _worker_list(cluster)
    index = _task_index(_field(config, "task", "TF_CONFIG"), cluster)
    return WorkerGroup(workers=workers, index=index)


def check_worker_index(cluster: WorkerGroup, worker_index: str | None) -> None:
    """Cross-check TF_CONFIG's task.index against $WORKER_INDEX, when both are set.

    In a pod, WORKER_INDEX comes from the Indexed Job's completion index while TF_CONFIG
    is rendered by the launcher: if they disagree, two pods would claim the same task and
    the group would deadlock, so this is a configuration error.

    Raises:
        ConfigError: the two indexes differ or WORKER_INDEX is not an integer.
    """
    if worker_index is None or not cluster.workers:
        return
    if worker_index.strip() != str(cluster.index):
        raise ConfigError(
            f"${contract.ENV_WORKER_INDEX}={worker_index!r} but TF_CONFIG task.index is "
            f"{cluster.index}; the pod's completion index and its TF_CONFIG must agree"
        )
