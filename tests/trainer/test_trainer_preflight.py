"""Preflight: TF_CONFIG, batch arithmetic, rendezvous and the environment, without TF."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.core import contract
from trainer import preflight
from trainer.errors import ConfigError, RendezvousTimeout
from trainer.preflight import WorkerGroup


def tf_config(workers: object, task: object) -> str:
    return json.dumps({"cluster": {"worker": workers}, "task": task})


TWO = ["10.0.0.1:2222", "10.0.0.2:2222"]


# --- TF_CONFIG ---------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [None, "", "  "])
def test_absent_tf_config_means_a_single_worker_chief(raw: str | None) -> None:
    cluster = preflight.parse_tf_config(raw)
    assert (cluster.num_workers, cluster.is_chief, cluster.is_multi_worker) == (1, True, False)
    assert cluster.label == "worker 0/1"


def test_valid_tf_config_gives_index_peers_and_label() -> None:
    cluster = preflight.parse_tf_config(tf_config(TWO, {"type": "worker", "index": 1}))
    assert cluster == WorkerGroup(workers=tuple(TWO), index=1)
    assert cluster.peers == ("10.0.0.1:2222",)
    assert cluster.address == "10.0.0.2:2222"
    assert not cluster.is_chief
    assert cluster.label == "worker 1/2"


def test_dns_names_and_ipv6_addresses_are_accepted() -> None:
    workers = ["job-0.svc.ns.svc.cluster.local:2222", "[fd00::1]:2222"]
    cluster = preflight.parse_tf_config(tf_config(workers, {"type": "worker", "index": 0}))
    assert cluster.peers == ("[fd00::1]:2222",)


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "TF_CONFIG must be a JSON object"),
        (json.dumps({"task": {"type": "worker", "index": 0}}), "TF_CONFIG.cluster is missing"),
        (
            json.dumps({"cluster": {}, "task": {"type": "worker", "index": 0}}),
            "cluster.worker is missing",
        ),
        (tf_config([], {"type": "worker", "index": 0}), "non-empty list"),
        (tf_config("a:1", {"type": "worker", "index": 0}), "non-empty list"),
        (tf_config(["a:1", 7], {"type": "worker", "index": 0}), "cluster.worker[1] is not"),
        (tf_config(["a:1", "a:1"], {"type": "worker", "index": 0}), "'a:1' twice"),
        (tf_config(["a"], {"type": "worker", "index": 0}), "not host:port"),
        (tf_config(["a:0"], {"type": "worker", "index": 0}), "no valid port"),
        (tf_config(["a:70000"], {"type": "worker", "index": 0}), "no valid port"),
        (tf_config(["a:http"], {"type": "worker", "index": 0}), "no valid port"),
        (json.dumps({"cluster": {"worker": TWO}}), "TF_CONFIG.task is missing"),
        (tf_config(TWO, {"index": 0}), "task.type is missing"),
        (tf_config(TWO, {"type": "ps", "index": 0}), "task.type is 'ps'"),
        (tf_config(TWO, {"type": "worker"}), "task.index is missing"),
        (tf_config(TWO, {"type": "worker", "index": "1"}), "must be an integer"),
        (tf_config(TWO, {"type": "worker", "index": True}), "must be an integer"),
        (tf_config(TWO, {"type": "worker", "index": 2}), "index 2 is out of range"),
        (tf_config(TWO, {"type": "worker", "index": -1}), "index -1 is out of range"),
        (
            json.dumps(
                {
                    "cluster": {"worker": TWO, "ps": ["p:1"]},
                    "task": {"type": "worker", "index": 0},
                }
            ),
            "job(s) ['ps']",
        ),
        (tf_config(TWO, {"type": "chief", "index": 0}), "task.type is 'chief'"),
        (
            json.dumps({"cluster": {"chief": ["c:1", "d:1"], "worker": TWO}}),
            "at most one chief",
        ),
        (
            json.dumps({"cluster": {"chief": ["c:1"], "master": ["m:1"], "worker": TWO}}),
            "at most one chief",
        ),
    ],
)
def test_bad_tf_config_is_a_config_error_naming_the_field(raw: str, names: str) -> None:
    with pytest.raises(ConfigError, match="TF_CONFIG") as error:
        preflight.parse_tf_config(raw)
    assert names in str(error.value)
    assert error.value.exit_code == contract.EXIT_CONFIG_ERROR


@pytest.mark.parametrize("chief", ["chief", "master"])
def test_a_chief_is_member_0_of_the_group_and_the_workers_follow_it(chief: str) -> None:
    cluster = {chief: ["c:1"], "worker": ["w0:1", "w1:1"]}
    groups = [
        preflight.parse_tf_config(json.dumps({"cluster": cluster, "task": task}))
        for task in ({"type": chief, "index": 0}, {"type": "worker", "index": 1})
    ]
    assert [g.workers for g in groups] == [("c:1", "w0:1", "w1:1")] * 2
    assert [(g.index, g.is_chief, g.address) for g in groups] == [
        (0, True, "c:1"),
        (2, False, "w1:1"),
    ]


def test_a_chief_alone_is_a_group_of_one() -> None:
    raw = json.dumps({"cluster": {"chief": ["c:1"]}, "task": {"type": "chief", "index": 0}})
    group = preflight.parse_tf_config(raw)
    assert (group.workers, group.index, group.is_multi_worker) == (("c:1",), 0, False)


def test_worker_index_that_disagrees_with_tf_config_is_a_config_error() -> None:
    cluster = WorkerGroup(workers=tuple(TWO), index=1)
    preflight.check_worker_index(cluster, None)
    preflight.check_worker_index(cluster, "1")
    preflight.check_worker_index(preflight.SINGLE_WORKER, "3")  # no TF_CONFIG: nothing to check
    with pytest.raises(ConfigError, match=r"WORKER_INDEX='0' but TF_CONFIG task\.index is 1"):
        preflight.check_worker_index(cluster, "0")


# --- batch and threads -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("global_batch", "replicas", "per_replica"), [(256, 1, 256), (256, 2, 128), (96, 3, 32)]
)
def test_divisible_global_batch_is_split_evenly(
    global_batch: int, replicas: int, per_replica: int
) -> None:
    assert preflight.per_replica_batch(global_batch, replicas) == per_replica


def test_indivisible_global_batch_is_a_config_error_suggesting_neighbours() -> None:
    with pytest.raises(ConfigError, match="not divisible by the 3 replicas") as error:
        preflight.per_replica_batch(256, 3)
    assert "255 or 258" in str(error.value)


def test_global_batch_below_the_replica_count_suggests_the_replica_count() -> None:
    with pytest.raises(ConfigError, match=r"e\.g\. 4$"):
        preflight.per_replica_batch(3, 4)


def test_explicit_thread_count_wins_and_auto_uses_the_usable_cpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(preflight, "usable_cpus", lambda: 8)
    assert preflight.thread_count(3) == 3
    assert preflight.thread_count(0) == 0
    assert preflight.thread_count("auto") == 8
    assert preflight.thread_count(3, workers_on_this_host=2) == 3


def test_auto_threads_share_the_cpus_among_the_workers_on_this_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(preflight, "usable_cpus", lambda: 2)
    assert preflight.thread_count("auto", workers_on_this_host=2) == 1
    assert preflight.thread_count("auto", workers_on_this_host=3) == 1  # at least one
    monkeypatch.setattr(preflight, "usable_cpus", lambda: 8)
    assert preflight.thread_count("auto", workers_on_this_host=3) == 2


@pytest.mark.parametrize(
    ("workers", "index", "expected"),
    [
        (("127.0.0.1:1", "127.0.0.1:2"), 0, 2),  # tflaunch local
        (("localhost:1", "127.0.0.1:2", "[::1]:3"), 2, 3),  # every loopback name is one host
        (("mnist-worker-0.mnist:2222", "mnist-worker-1.mnist:2222"), 1, 1),  # pods
        (("10.0.0.5:1", "10.0.0.5:2", "10.0.0.6:1"), 0, 2),
        ((), 0, 1),  # no TF_CONFIG
    ],
)
def test_workers_on_this_host_come_from_the_hosts_in_tf_config(
    workers: tuple[str, ...], index: int, expected: int
) -> None:
    assert WorkerGroup(workers=workers, index=index).workers_on_this_host == expected


@pytest.mark.parametrize(
    ("cpus", "sharing", "shares"),
    [
        ([1, 0], 2, [{0}, {1}]),  # tflaunch local's 2 workers on 2 cores
        (range(8), 3, [{0, 1}, {2, 3}, {4, 5}]),  # equal runs; CPUs 6 and 7 unused
        ([0, 1], 3, [{0}, {1}, {0}]),  # fewer CPUs than workers: round-robin
        ([4, 5, 6, 7], 1, [{4, 5, 6, 7}]),
    ],
)
def test_workers_sharing_a_host_get_disjoint_cpu_shares(
    cpus: list[int], sharing: int, shares: list[set[int]]
) -> None:
    assert [preflight.cpu_share(cpus, sharing, rank) for rank in range(sharing)] == shares


@pytest.mark.parametrize(
    ("workers", "index", "rank"),
    [
        (("127.0.0.1:1", "localhost:2", "127.0.0.1:3"), 2, 2),
        (("10.0.0.5:1", "10.0.0.6:1", "10.0.0.5:2"), 2, 1),  # worker 1 is on another host
        (("10.0.0.5:1", "10.0.0.6:1"), 1, 0),
        ((), 0, 0),
    ],
)
def test_rank_on_this_host_counts_the_lower_indexes_on_the_same_host(
    workers: tuple[str, ...], index: int, rank: int
) -> None:
    assert WorkerGroup(workers=workers, index=index).rank_on_this_host == rank


@pytest.mark.parametrize(
    ("threads", "workers", "index", "pinned"),
    [
        ("auto", ("127.0.0.1:1", "127.0.0.1:2"), 1, {2, 3}),
        ("auto", ("127.0.0.1:1", "127.0.0.1:2"), 0, {0, 1}),
        (2, ("127.0.0.1:1", "127.0.0.1:2"), 1, None),  # threads chosen by hand: not pinned
        ("auto", ("mnist-worker-0.mnist:2222", "mnist-worker-1.mnist:2222"), 1, None),  # pods
        ("auto", (), 0, None),
    ],
)
def test_only_auto_threads_with_workers_sharing_the_host_pin_the_process(
    monkeypatch: pytest.MonkeyPatch,
    threads: int | str,
    workers: tuple[str, ...],
    index: int,
    pinned: set[int] | None,
) -> None:
    calls: list[tuple[int, set[int]]] = []
    monkeypatch.setattr(preflight.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(
        preflight.os, "sched_setaffinity", lambda pid, cpus: calls.append((pid, cpus))
    )
    group = WorkerGroup(workers=workers, index=index)
    assert preflight.pin_to_cpu_share(threads, group) == pinned
    assert calls == ([(0, pinned)] if pinned else [])


def test_a_pinned_worker_runs_as_many_threads_as_its_cpus_within_the_cgroup_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(preflight, "cgroup_cpu_limit", lambda: None)
    assert preflight.thread_count("auto", 2, pinned={2, 3}) == 2
    monkeypatch.setattr(preflight, "cgroup_cpu_limit", lambda: 2)  # e.g. docker --cpus 2
    assert preflight.thread_count("auto", 2, pinned={2, 3}) == 1
    assert preflight.thread_count(4, 2, pinned={2, 3}) == 4


def test_usable_cpus_are_capped_by_the_cgroup_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight, "cgroup_cpu_limit", lambda: 1)
    assert preflight.usable_cpus() == 1


@pytest.mark.parametrize(
    ("text", "cpus"), [("max 100000", None), ("150000 100000", 2), ("50000 100000", 1)]
)
def test_cgroup_cpu_limit_is_rounded_up(tmp_path: object, text: str, cpus: int | None) -> None:
    path = f"{tmp_path}/cpu.max"
    with open(path, "w") as f:
        f.write(text)
    assert preflight.cgroup_cpu_limit(path) == cpus


# --- environment -------------------------------------------------------------------------


def test_legacy_keras_is_set_when_absent_without_a_warning() -> None:
    env: dict[str, str] = {}
    assert preflight.prepare_environment(env, None) is None
    assert env[contract.ENV_LEGACY_KERAS] == "1"


def test_another_legacy_keras_value_is_overridden_and_explained() -> None:
    env = {contract.ENV_LEGACY_KERAS: "0"}
    warning = preflight.prepare_environment(env, None)
    assert env[contract.ENV_LEGACY_KERAS] == "1"
    assert warning is not None and "keras-team/keras#20585" in warning


@pytest.mark.parametrize(
    ("expect_gpus", "user_value", "expected"),
    [(0, None, "CPU"), (None, None, None), (1, None, None), (0, "CPU,GPU", "CPU,GPU")],
)
def test_a_cpu_only_worker_hides_the_gpu_device_types_from_tensorflow(
    expect_gpus: int | None, user_value: str | None, expected: str | None
) -> None:
    env = {} if user_value is None else {preflight.ENV_ENABLED_DEVICE_TYPES: user_value}
    preflight.prepare_environment(env, expect_gpus)
    assert env.get(preflight.ENV_ENABLED_DEVICE_TYPES) == expected


def test_preflight_does_not_import_tensorflow_at_module_level() -> None:
    source = Path(preflight.__file__).read_text()
    top_level = [line for line in source.splitlines() if line.startswith(("import", "from"))]
    assert not [line for line in top_level if "tensorflow" in line or "keras" in line]


# --- rendezvous --------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_backoff_polls_quickly_for_a_second_then_doubles_up_to_a_cap() -> None:
    delays = preflight.backoff_delays()
    assert [next(delays) for _ in range(27)] == [0.05] * 20 + [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]


def test_rendezvous_retries_dns_failures_until_the_peer_answers() -> None:
    clock = FakeClock()
    answers = iter(["DNS: Name or service not known"] * 3 + [None])
    preflight.wait_for_peers(
        ["b:1"], timeout=30, probe_fn=lambda peer, t: next(answers), clock=clock, sleep=clock.sleep
    )
    assert clock.sleeps == [0.05, 0.05, 0.05]


def test_rendezvous_timeout_names_only_the_peers_that_never_came() -> None:
    clock = FakeClock()

    def probe(peer: str, timeout: float) -> str | None:
        return None if peer == "up:1" else "Connection refused"

    with pytest.raises(RendezvousTimeout) as error:
        preflight.wait_for_peers(
            ["up:1", "down:2"], timeout=10, probe_fn=probe, clock=clock, sleep=clock.sleep
        )
    message = str(error.value)
    assert "down:2 (Connection refused)" in message and "up:1" not in message
    assert error.value.exit_code == contract.EXIT_RENDEZVOUS_TIMEOUT
    assert clock.now == pytest.approx(10)


def test_probe_listener_answers_while_waiting_and_frees_the_port_for_tensorflow() -> None:
    port = _free_port()
    address = f"127.0.0.1:{port}"
    assert preflight.probe(address, 1.0) is not None
    with preflight.ProbeListener(port):
        assert preflight.probe(address, 1.0) is None
        assert preflight.probe(address, 1.0) is None
    assert preflight.probe(address, 1.0) is not None
    with socket.create_server(("", port)):  # what TensorFlow's gRPC server will do next
        pass


def _own_addresses() -> list[str]:
    """This machine's IPv4 addresses other than loopback (`ip -4 addr`)."""
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command to list this machine's addresses")
    text = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    addresses = [a for a in re.findall(r"inet (\d+\.\d+\.\d+\.\d+)", text) if a[:4] != "127."]
    if not addresses:
        pytest.skip("this machine has no non-loopback IPv4 address to connect to")
    return addresses


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_probe_listener_of_a_loopback_worker_is_not_reachable_from_the_network(host) -> None:
    port = _free_port()
    with preflight.ProbeListener(port, host):
        assert preflight.probe(f"{host}:{port}", 1.0) is None
        for address in _own_addresses():
            assert preflight.probe(f"{address}:{port}", 1.0) is not None, address


def _two_workers_rendezvous(
    delays: tuple[float, float], timeout: float, then: Callable[[int], None] = lambda port: None
) -> list[BaseException]:
    """Two workers on loopback, each starting its rendezvous after its delay and then
    calling `then(its port)`, in threads; what they raised."""
    addresses = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
    clusters = [WorkerGroup(workers=tuple(addresses), index=i) for i in range(2)]
    errors: list[BaseException] = []

    def worker(cluster: WorkerGroup, delay: float) -> None:
        time.sleep(delay)
        try:
            preflight.rendezvous(cluster, timeout=timeout)
            then(preflight.split_address(str(cluster.address))[1])
        except BaseException as e:  # collected and asserted by the caller
            errors.append(e)

    threads = [
        threading.Thread(target=worker, args=(c, d)) for c, d in zip(clusters, delays, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * timeout)
    return errors


def test_two_workers_find_each_other_through_their_probe_listeners() -> None:
    """The fast worker passes rendezvous and starts "TensorFlow" (a plain listener on
    its port) while the slow one is still probing: the slow one must still get through."""
    done = threading.Barrier(2, timeout=15)

    def serve_like_tensorflow(port: int) -> None:
        with socket.create_server(("", port)):  # TensorFlow's gRPC server
            done.wait()

    assert _two_workers_rendezvous((0.0, 1.0), timeout=10, then=serve_like_tensorflow) == []


def test_a_worker_that_sees_its_peer_first_stays_until_the_peer_has_seen_it() -> None:
    """Nothing listens on a worker's port after its rendezvous (the worker wrapper's
    listener is gone, the trainer's comes after TensorFlow's import): the worker that got
    through first must keep answering until the other got through too."""
    assert _two_workers_rendezvous((0.0, 0.12), timeout=3) == []


def test_the_probe_listener_counts_the_probes_it_answered() -> None:
    port = _free_port()
    with preflight.ProbeListener(port) as listener:
        assert not listener.await_probes(1, timeout=0.05)
        for _ in range(2):
            assert preflight.probe(f"127.0.0.1:{port}", 1.0) is None
        assert listener.await_probes(2, timeout=2.0)
        assert not listener.await_probes(3, timeout=0.05)


class _SpeaksFirst:
    """A listener that sends bytes as soon as it accepts, as a gRPC server sends its HTTP/2
    SETTINGS frame (TensorFlow's sends 46 bytes)."""

    def __init__(self, port: int) -> None:
        self._server = socket.create_server(("", port))
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            with connection:
                connection.sendall(b"\x00\x00\x18\x04")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self._thread.join()


def test_a_grpc_server_is_told_apart_from_a_stand_in_and_from_nothing() -> None:
    port = _free_port()
    address = f"127.0.0.1:{port}"
    assert not preflight.serves_grpc(address, 1.0)  # refused
    with preflight.ProbeListener(port):
        assert not preflight.serves_grpc(address, 1.0)  # accepted and closed
    server = _SpeaksFirst(port)
    try:
        assert preflight.serves_grpc(address, 1.0)
    finally:
        server.close()


def test_a_chief_whose_connect_times_out_is_not_taken_for_tensorflow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pod whose SYNs go unanswered times the connect out; only a quiet accepted
    connection counts as a server that has not spoken yet."""

    def unanswered(address: object, timeout: float) -> socket.socket:
        raise TimeoutError("timed out")

    monkeypatch.setattr(preflight.socket, "create_connection", unanswered)
    assert not preflight.serves_grpc("mnist-worker-0.mnist:2222", 0.1)


def test_a_listener_that_accepts_and_stays_quiet_counts_as_a_server() -> None:
    port = _free_port()
    with socket.create_server(("", port)):  # the kernel accepts; nothing is sent or closed
        assert preflight.serves_grpc(f"127.0.0.1:{port}", 0.2)


def test_a_non_chief_waits_through_the_stand_in_and_the_gap_for_the_chiefs_tensorflow() -> None:
    """The chief's stand-in, then nothing (the chief between closing it and TensorFlow
    binding), then TensorFlow: the wait ends only with TensorFlow."""
    port = _free_port()
    result: list[bool] = []
    stand_in = preflight.ProbeListener(port)

    def wait() -> None:
        result.append(preflight.await_tensorflow(f"127.0.0.1:{port}", timeout=10))

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.2)
    stand_in.close()
    time.sleep(0.2)
    assert not result, "the wait ended before TensorFlow listened"
    server = _SpeaksFirst(port)
    try:
        waiter.join(10)
    finally:
        server.close()
    assert result == [True]


def test_a_chief_that_never_listens_ends_the_wait_at_its_cap() -> None:
    clock = FakeClock()
    checked: list[str] = []

    def check(address: str, timeout: float) -> bool:
        checked.append(address)
        return False

    assert not preflight.await_tensorflow(
        "chief:2222", 1.0, check=check, clock=clock, sleep=clock.sleep
    )
    assert clock.now == pytest.approx(1.0, abs=preflight.TENSORFLOW_POLL_SECONDS)
    assert set(checked) == {"chief:2222"} and len(checked) > 50


def test_a_port_held_by_another_process_is_a_transient_error() -> None:
    with socket.create_server(("", 0)) as holder:
        port = holder.getsockname()[1]
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        with pytest.raises(preflight.TransientError, match=f"port {port}"):
            preflight.ProbeListener(port)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("code", "says"),
    [(28, "the volume is full"), (122, "the volume is full"), (30, "read-only")],
)  # ENOSPC, EDQUOT, EROFS
def test_a_full_or_read_only_volume_is_not_blamed_on_fsgroup(monkeypatch, tmp_path, code, says):
    import os as os_module

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(code, os_module.strerror(code))

    monkeypatch.setattr(preflight.os, "makedirs", refuse)
    with pytest.raises(ConfigError) as caught:
        preflight.check_writable(str(tmp_path / "ckpt"), "worker 0/2")
    message = str(caught.value)
    assert says in message and "chown" not in message and "fsGroup" not in message
