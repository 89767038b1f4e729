"""Checks that run before MultiWorkerMirroredStrategy is constructed.

Once the strategy exists, every mistake turns into a TensorFlow stack trace or, worse, a
hang while the gRPC server waits for peers. So the cheap questions are asked here first,
each failure becoming one message that names the field at fault: is TF_CONFIG sane, are
the GPUs we were promised visible, does the global batch divide, are the peers up?

This module must not import TensorFlow at module level: `prepare_environment` has to run
before the first TensorFlow import (Keras 3's fit fails under MWMS, keras-team/keras#20585,
so TF_USE_LEGACY_KERAS=1 must be in the environment when TensorFlow loads tf-keras).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from types import TracebackType

from launcher.core import contract
from trainer.errors import ConfigError, RendezvousTimeout, TransientError
from trainer.worker_group import SINGLE_WORKER as SINGLE_WORKER
from trainer.worker_group import WORKER_JOB as WORKER_JOB
from trainer.worker_group import WorkerGroup as WorkerGroup
from trainer.worker_group import check_worker_index as check_worker_index
from trainer.worker_group import is_loopback as is_loopback
from trainer.worker_group import parse_tf_config as parse_tf_config
from trainer.worker_group import split_address as split_address

log = logging.getLogger(__name__)

QUICK_POLL_SECONDS = 0.05
QUICK_POLL_COUNT = 20
"""Peers started beside each other answer within a second: polled every 50 ms for the first
second (a refused connection or a cached DNS miss costs microseconds), then backed off."""
TENSORFLOW_POLL_SECONDS = 0.01
"""How often a non-chief looks for the chief's TensorFlow after the rendezvous: the chief
binds its port ~0.1 s after its stand-in closes, and every 10 ms of lateness is waited."""
BACKOFF_FIRST_SECONDS = 0.2
BACKOFF_MAX_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 2.0
HANDOVER_SECONDS = BACKOFF_MAX_SECONDS + CONNECT_TIMEOUT_SECONDS
"""The longest a port's hand-over between a stand-in and TensorFlow is waited for, from
either side: a peer's longest retry sleep plus a connect timeout."""


# --- environment -------------------------------------------------------------------------


ENV_ENABLED_DEVICE_TYPES = "TF_ENABLED_DEVICE_TYPES"
"""TensorFlow's list of device factories to load; "CPU" keeps it from initializing CUDA."""


def prepare_environment(
    env: MutableMapping[str, str], expect_gpus: int | None, debug: bool = False
) -> str | None:
    """Fix the environment before TensorFlow is imported.

    Forces TF_USE_LEGACY_KERAS=1. With `expect_gpus` 0 (gpusPerWorker 0), TensorFlow
    loads only its CPU device factory: it never calls cuInit, so a CPU machine gets no
    "E0000 ... failed call to cuInit" line, and a CPU worker on a GPU node leaves the
    node's GPUs to the pods that requested them. TensorFlow's C++ INFO lines (oneDNN,
    CUDA stubs) drown the worker's own log: they show only with `debug`. A value the user
    set wins.

    Returns:
        A warning to log when the user had set another value, else None. The warning is
        returned, not logged, because logging is configured only later.
    """
    previous = env.get(contract.ENV_LEGACY_KERAS)
    env[contract.ENV_LEGACY_KERAS] = "1"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if debug else "1")
    if expect_gpus == 0:
        env.setdefault(ENV_ENABLED_DEVICE_TYPES, "CPU")
    if previous is None or previous == "1":
        return None
    return (
        f"{contract.ENV_LEGACY_KERAS} was {previous!r}; overriding it with '1' because "
        "Keras 3's fit fails under MultiWorkerMirroredStrategy (keras-team/keras#20585) "
        "and the trainer uses tf-keras"
    )


# --- batch -------------------------------------------------------------------------------


def per_replica_batch(global_batch: int, replicas: int) -> int:
    """The batch each replica computes on; the global batch must divide evenly.

    Raises:
        ConfigError: suggesting the nearest valid global batch sizes.
    """
    if global_batch % replicas == 0:
        return global_batch // replicas
    below = global_batch // replicas * replicas
    above = below + replicas
    nearby = f"{below} or {above}" if below else f"{above}"
    raise ConfigError(
        f"--global-batch-size {global_batch} is not divisible by the {replicas} replicas "
        f"in sync; use a multiple of {replicas}, e.g. {nearby}"
    )


# --- devices -----------------------------------------------------------------------------


def check_devices(expect_gpus: int | None, label: str) -> int:
    """Log what TensorFlow sees and return the number of GPUs.

    Imports TensorFlow, so it must run after `prepare_environment`.

    Raises:
        ConfigError: fewer GPUs than `expect_gpus` are visible.
    """
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    gpus = tf.config.list_physical_devices("GPU")
    log.info(
        "TensorFlow %s sees %d CPU and %d GPU device(s)%s",
        tf.__version__,
        len(cpus),
        len(gpus),
        f": {[g.name for g in gpus]}" if gpus else "",
    )
    if expect_gpus is not None and len(gpus) < expect_gpus:
        raise ConfigError(
            f"{label} expected {expect_gpus} GPU(s) but TensorFlow sees {len(gpus)}. "
            "Check, in order: the NVIDIA driver is installed on the node (nvidia-smi "
            "there); the container runtime exposes GPUs (nvidia-container-toolkit / the "
            "NVIDIA device plugin); the pod spec requests them (resources.limits "
            f"nvidia.com/gpu: {expect_gpus}); and the image has a CUDA build of "
            f"TensorFlow (tf.test.is_built_with_cuda() is {tf.test.is_built_with_cuda()})."
        )
    return len(gpus)


# --- rendezvous --------------------------------------------------------------------------


class ProbeListener:
    """A throwaway TCP listener on this worker's own port while it waits for peers.

    Peers only see TensorFlow's gRPC port once MWMS is constructed, and we construct it
    only once the peers are reachable: without a stand-in, every worker would wait for the
    others forever. The listener accepts and closes connections, counting them; `close()`
    frees the port (SO_REUSEADDR) right before TensorFlow binds it. A peer that probes us
    after that reaches TensorFlow's gRPC server instead, and a bare connect-and-close is
    harmless to it; a peer that probes in the gap between the two gets "refused" and
    retries. `await_probes` keeps the stand-in up until every peer has reached it: a worker
    that left as soon as it had seen its peers would leave a slower peer waiting for the
    next listener on this port (the trainer's, after TensorFlow's import: seconds).
    """

    def __init__(self, port: int, host: str = "") -> None:
        """Listen on `host` (this worker's TF_CONFIG host) when it is a loopback address, as
        in `tflaunch local`, so the stand-in is reachable from this machine only; else on
        every interface, as TensorFlow's own server will (a pod's name resolves to its IP
        only once the headless Service publishes it)."""
        try:
            if is_loopback(host):
                bind = "127.0.0.1" if host == "localhost" else host
                family = socket.AF_INET6 if ":" in bind else socket.AF_INET
                self._socket = socket.create_server((bind, port), family=family)
            elif socket.has_dualstack_ipv6():
                self._socket = socket.create_server(
                    ("", port), family=socket.AF_INET6, dualstack_ipv6=True
                )
            else:
                self._socket = socket.create_server(("", port))
        except OSError as e:
            raise TransientError(
                f"cannot listen on this worker's port {port} ({e}); another process "
                "holds it, and TensorFlow could not bind it either"
            ) from None
        self._socket.settimeout(0.2)
        self._stop = threading.Event()
        self._probed = threading.Condition()
        self._accepted = 0
        self._thread = threading.Thread(target=self._serve, name="probe-listener", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except (TimeoutError, OSError):
                continue
            connection.close()
            with self._probed:
                self._accepted += 1
                self._probed.notify_all()

    def await_probes(self, count: int, timeout: float) -> bool:
        """Wait until `count` connections were accepted (each peer's probe connects once
        it succeeds), at most `timeout` seconds; True if they came."""
        with self._probed:
            return self._probed.wait_for(lambda: self._accepted >= count, timeout)

    def close(self) -> None:
        """Stop accepting and free the port for TensorFlow's gRPC server."""
        self._stop.set()
        # Wakes the blocked accept() at once (Linux: EINVAL) instead of at its timeout,
        # which every worker would wait out before its trainer starts.
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._thread.join()
        self._socket.close()

    def __enter__(self) -> ProbeListener:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def probe(address: str, timeout: float) -> str | None:
    """Try to resolve and connect to `address`; None when it answered, else why not."""
    host, port = split_address(address)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        return f"DNS: {e.strerror}"
    reason = "no address"
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as connection:
                connection.settimeout(timeout)
                connection.connect(sockaddr)
            return None
        except OSError as e:
            reason = e.strerror or type(e).__name__
    return reason


def backoff_delays(
    first: float = BACKOFF_FIRST_SECONDS,
    cap: float = BACKOFF_MAX_SECONDS,
    quick: float = QUICK_POLL_SECONDS,
    quick_count: int = QUICK_POLL_COUNT,
) -> Iterable[float]:
    """`quick_count` x `quick`, then 0.2, 0.4, 0.8 ... seconds, capped: quick when peers are
    close (the delay after the peer came up is what a worker waits for nothing), gentle
    when not."""
    yield from itertools.repeat(quick, quick_count)
    delay = first
    while True:
        yield delay
        delay = min(cap, delay * 2)


def wait_for_peers(
    peers: Iterable[str],
    timeout: float,
    probe_fn: Callable[[str, float], str | None] = probe,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once every peer resolves and accepts TCP; DNS failures are retried too.

    A peer may be slow to get a DNS record (headless Services publish a pod once it
    runs, and resolvers cache the negative answer meanwhile), so every failure is
    retried with capped exponential backoff until `timeout`.

    Raises:
        RendezvousTimeout: naming every peer that never answered, and why.
    """
    deadline = clock() + timeout
    pending = {peer: "not tried" for peer in peers}
    delays = iter(backoff_delays())
    while pending:
        for peer in list(pending):
            remaining = max(0.05, deadline - clock())
            reason = probe_fn(peer, min(CONNECT_TIMEOUT_SECONDS, remaining))
            if reason is None:
                log.info("peer %s is reachable", peer)
                del pending[peer]
            else:
                pending[peer] = reason
        if not pending:
            return
        remaining = deadline - clock()
        if remaining <= 0:
            missing = ", ".join(f"{peer} ({why})" for peer, why in sorted(pending.items()))
            raise RendezvousTimeout(
                f"peers never became reachable within {timeout:g}s: {missing}. Their pods "
                "may not be scheduled or running, or the headless Service / DNS name "
                "does not match TF_CONFIG"
            )
        sleep(min(next(delays), remaining))


def serves_grpc(address: str, timeout: float) -> bool:
    """True if a gRPC server, not a stand-in listener, accepts at `address`: gRPC servers
    send their HTTP/2 SETTINGS frame as soon as they accept; a stand-in closes at once."""
    host, port = split_address(address)
    try:
        connection = socket.create_connection((host, port), timeout=timeout)
    except OSError:  # refused, unresolvable, or no answer to the connect at all
        return False
    with connection:
        try:
            return bool(connection.recv(16))
        except TimeoutError:
            return True  # accepted, and not closed as a stand-in does: just quiet so far
        except OSError:
            return False


def await_tensorflow(
    address: str,
    timeout: float,
    check: Callable[[str, float], bool] = serves_grpc,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Wait until TensorFlow listens at `address` (the chief's), at most `timeout` seconds;
    True if it does.

    A non-chief starts its strategy only then. Its first gRPC connect to the chief, refused
    in the moment between the chief's stand-in closing and TensorFlow binding the port,
    waits out gRPC's reconnect backoff (1 s in TensorFlow): seen in 1 run of 4 of the demo.
    A late answer only delays this worker; the strategy has its own deadlines.
    """
    deadline = clock() + timeout
    while True:
        if check(address, CONNECT_TIMEOUT_SECONDS):
            return True
        if clock() >= deadline:
            return False
        sleep(TENSORFLOW_POLL_SECONDS)


def rendezvous(cluster: WorkerGroup, timeout: float) -> None:
    """Wait for every peer while answering their probes on our own port."""
    if not cluster.is_multi_worker or cluster.address is None:
        return
    host, port = split_address(cluster.address)
    log.info("waiting up to %gs for peers %s", timeout, ", ".join(cluster.peers))
    started = time.monotonic()
    with ProbeListener(port, host) as listener:
        wait_for_peers(cluster.peers, timeout)
        # A peer still between two probes has not seen us yet. Its longest sleep is
        # BACKOFF_MAX_SECONDS; after that (it may have passed its rendezvous before we
        # came) we leave anyway: it retries until the next listener answers.
        listener.await_probes(len(cluster.peers), HANDOVER_SECONDS)
    log.info("all %d peers reachable after %.1fs", len(cluster.peers), time.monotonic() - started)


# --- threads -----------------------------------------------------------------------------


def cgroup_cpu_limit(path: str = "/sys/fs/cgroup/cpu.max") -> int | None:
    """The CPU limit of this container (cgroup v2 cpu.max, rounded up), None if none."""
    try:
        with open(path, encoding="ascii") as f:
            quota, period = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def usable_cpus() -> int:
    """CPUs this process may run on: affinity mask, capped by the cgroup limit.

    TensorFlow sizes its thread pools from the host's core count, which in a pod limited
    to 2 CPUs on a 64-core node means 64 threads fighting over 2 cores.
    """
    affinity = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
    limit = cgroup_cpu_limit()
    return min(affinity, limit) if limit else affinity


def cpu_share(cpus: Sequence[int], sharing: int, rank: int) -> set[int]:
    """The CPUs of `cpus` that worker `rank` of `sharing` workers on one host runs on: an
    equal contiguous run each (any remainder unused), or one CPU each, round-robin, when
    there are fewer CPUs than workers."""
    ordered = sorted(cpus)
    size = len(ordered) // sharing
    if size == 0:
        return {ordered[rank % len(ordered)]}
    return set(ordered[rank * size : (rank + 1) * size])


def pin_to_cpu_share(requested_threads: int | str, cluster: WorkerGroup) -> set[int] | None:
    """With `--threads auto` and several workers on this host (`tflaunch local`), keep this
    process, and every thread it starts from now on, on its own share of the CPUs; the CPUs
    pinned to, or None when nothing was pinned.

    Call it before any thread starts: threads inherit the affinity of the thread that
    creates them. Two workers on 2 cores, each on its own core: `fit` 2.15-2.23 s against
    2.61-2.89 s unpinned, 4 alternating runs each (docs/performance.md, "Threads"). Only
    the trainer pins, because it sizes its thread pools to the share; a program that sizes
    its own (`--script`) ran 1.5x slower pinned.
    """
    sharing = cluster.workers_on_this_host
    if requested_threads != "auto" or sharing < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    share = cpu_share(list(os.sched_getaffinity(0)), sharing, cluster.rank_on_this_host)
    os.sched_setaffinity(0, share)
    return share


def thread_count(
    requested: int | str, workers_on_this_host: int = 1, pinned: set[int] | None = None
) -> int:
    """Threads per worker: the requested count, 0 for TF's default, or for "auto" the
    usable CPUs shared out among the workers on this host (at least 1 each): the CPUs
    `pin_to_cpu_share` pinned this worker to, if it did, within its share of the
    container's CPU limit.

    Shared out, not each taking all: 2 local workers on 2 cores, 3 epochs of the demo
    (docs/performance.md, "Threads"), 4 alternating runs each: 1 thread per worker ran
    `fit` in 0.87x the time of 2 (mixed_bfloat16) and 0.92x (float32), the whole command
    in 0.94x / 0.95x; intra 1 with inter-op 2 was in between. Pods on a node each have
    their own cgroup limit and a host of their own in TF_CONFIG, so this divides by 1.
    """
    if isinstance(requested, int):
        return requested
    sharing = max(1, workers_on_this_host)
    if pinned:
        limit = cgroup_cpu_limit()
        return max(1, min(len(pinned), limit // sharing)) if limit else len(pinned)
    return max(1, usable_cpus() // sharing)


# --- the checkpoint volume ---------------------------------------------------------------


def check_writable(directory: str | None, label: str, what: str = "checkpoint directory") -> None:
    """Create `directory` and write a file into it, as this worker's UID.

    A volume the worker cannot write (an NFS export that ignores the pod's fsGroup, a claim
    owned by another UID) would otherwise fail the first checkpoint, deep inside training,
    as an exit 1 that the group restarts retry in vain.

    Raises:
        ConfigError: naming the path and the UID/GID, and how to fix the volume.
    """
    if not directory:
        return
    # Not the PID alone: every pod has its own PID namespace, so the workers sharing a volume
    # have the same PID, and one would remove the other's probe between its write and remove.
    probe = os.path.join(directory, f".tflaunch-write-check-{os.getpid()}-{secrets.token_hex(8)}")
    try:
        os.makedirs(directory, exist_ok=True)
        with open(probe, "w", encoding="utf-8") as f:
            f.write("ok\n")
        os.remove(probe)
    except OSError as error:
        uid, gid = os.geteuid(), os.getegid()
        if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            fix = (
                "the volume is mounted read-only; mount it read-write"
                if error.errno == errno.EROFS
                else "the volume is full; free space or give it more (a larger claim)"
            )
            raise ConfigError(
                f"{label}: cannot write the {what} {directory}: {error.strerror}; {fix}"
            ) from None
        raise ConfigError(
            f"{label}: cannot write the {what} {directory} as UID {uid} (GID {gid}): "
            f"{error.strerror or error}; the checkpoint volume (spec.checkpoint.claimName) "
            f"must be writable by UID {uid}: NFS and some other volumes ignore fsGroup, so "
            f"chown the export (or that directory) to {uid}:{gid}, or make it group-writable "
            f"for GID {gid}"
        ) from None
