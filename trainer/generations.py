"""The group restart in place: a control port beside every worker's TensorFlow port and a
barrier numbered by generation (docs/design.md, "Group restart in place").

A generation is one attempt of the whole group; its number is the group restarts so far.
Every wrapper answers on its control port with a `Report` (its generation, whether its
program runs, why its last one failed). One exchange is one TCP connection: the caller sends
its report as a JSON line, the callee answers with its own, and each keeps the other's. A
wrapper whose program failed moves to the next generation and tells every peer at once; the
peers also ask each other every POLL_SECONDS, so a lost message costs that long, no more.

Generations only grow, so a wrapper that acted on a stale view of a peer is corrected at the
next exchange. A peer whose wrapper is new (its pod was recreated) shows another
incarnation: a program that trained with the old one cannot go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping

from launcher.core import contract, exit_policy
from trainer import preflight
from trainer.errors import RendezvousTimeout, TransientError

log = logging.getLogger("tflaunch.worker")

POLL_SECONDS = 0.5
"""How often a wrapper at the barrier asks every peer for its report."""
RUNNING_POLL_SECONDS = 2.0
"""How often while its program runs: news (a failure, a new wrapper) is pushed at once, so
this only makes up for a push that was lost (N workers make N x (N - 1) exchanges a poll)."""
EXCHANGE_TIMEOUT_SECONDS = 1.0
"""Connect and answer, per peer: a peer slower than this is asked again at the next poll."""
MAX_LINE = 4096
SETTLE_SECONDS = 0.5
"""How long a program may go on after a peer's program exited with an error, before it is
stopped: an error in the program itself (a NameError) comes within moments on every worker,
and only a worker whose program failed by itself counts for `Group.repeated`."""


class PeerFinished(Exception):
    """Peers whose wrapper left after their program finished (exit 0): their pods have
    ended for good, so no generation can have them again."""

    def __init__(self, workers: list[int]) -> None:
        super().__init__(", ".join(f"worker {w}" for w in workers))
        self.workers = workers


@dataclasses.dataclass(frozen=True)
class Report:
    """What a wrapper says of itself on its control port."""

    worker: int
    incarnation: str
    """Random per wrapper process: a new one means the peer's pod (or wrapper) was replaced."""
    generation: int
    running: bool = False
    """Its program of `generation` runs (else it waits at the barrier)."""
    failed: str = ""
    """Why its program of the previous generation failed by itself ("" when it was stopped
    because the group moved on)."""
    exited: bool = False
    """That program exited with an error code (an exception), not on a signal."""
    ended: int | None = None
    """The wrapper's exit code once it is leaving (its pod ends)."""
    members: tuple[str, ...] = ()
    """While running: the peers' incarnations its program started with."""

    def to_line(self) -> bytes:
        return json.dumps(dataclasses.asdict(self)).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> Report | None:
        """The report in `line`; None for anything else (a probe, a stranger)."""
        try:
            fields = json.loads(line)
            return cls(
                worker=int(fields["worker"]),
                incarnation=str(fields["incarnation"]),
                generation=int(fields["generation"]),
                running=bool(fields["running"]),
                failed=str(fields["failed"]),
                exited=bool(fields["exited"]),
                ended=None if fields["ended"] is None else int(fields["ended"]),
                members=tuple(str(m) for m in fields["members"]),
            )
        except (ValueError, TypeError, KeyError):
            return None


def control_address(address: str) -> tuple[str, int]:
    """A worker's control (host, port), from its TF_CONFIG "host:port"."""
    host, port = preflight.split_address(address)
    return host, port + contract.CONTROL_PORT_OFFSET


def _listen(host: str, port: int) -> socket.socket:
    """Listen as `preflight.ProbeListener` does: on a loopback host only when TF_CONFIG names
    one (`tflaunch local`, tests), else on every interface (a pod)."""
    try:
        if preflight.is_loopback(host):
            bind = "127.0.0.1" if host == "localhost" else host
            family = socket.AF_INET6 if ":" in bind else socket.AF_INET
            return socket.create_server((bind, port), family=family)
        if socket.has_dualstack_ipv6():
            return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
        return socket.create_server(("", port))
    except OSError as e:
        raise TransientError(
            f"cannot listen on the control port {port} ({e}); the TensorFlow port + "
            f"{contract.CONTROL_PORT_OFFSET} must be free for the restart in place"
        ) from None


def _read_line(connection: socket.socket) -> bytes:
    data = b""
    while b"\n" not in data and len(data) < MAX_LINE:
        chunk = connection.recv(MAX_LINE)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


class Group:
    """This wrapper's side of the barrier: its control port, its view of every peer."""

    def __init__(
        self, cluster: preflight.WorkerGroup, generation: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        assert cluster.address is not None
        self._clock = clock
        self._peers = {
            i: control_address(address)
            for i, address in enumerate(cluster.workers)
            if i != cluster.index
        }
        self._news = threading.Condition()
        self._me = Report(cluster.index, secrets.token_hex(8), generation)
        self._heard: dict[int, tuple[Report, float]] = {}
        self._members: dict[int, str] = {}
        """The peers' incarnations the running generation started with."""
        self.moved_on = threading.Event()
        """Set while a program runs when the group left its generation without it."""
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._socket = _listen(*control_address(cluster.address))
        self._socket.settimeout(0.2)
        self._threads = [
            threading.Thread(target=self._serve, name="control-port", daemon=True),
            threading.Thread(target=self._poll, name="control-poll", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @property
    def me(self) -> Report:
        with self._news:
            return self._me

    def peers(self) -> Mapping[int, Report]:
        """The latest report heard from each peer."""
        with self._news:
            return {i: report for i, (report, _) in self._heard.items()}

    # --- the main thread's verbs ---------------------------------------------------------

    def barrier(self, generation: int, timeout: float) -> int:
        """Wait until every peer answers `generation` or more; the generation to run (a
        peer already beyond sends us on to its own).

        Only answers given after the call count: a report from before may be a replaced
        peer's.

        Raises:
            RendezvousTimeout: naming the peers that never reached it.
            PeerFinished: a peer finished its program (exit 0) and left: it never will.
        """
        entered = self._clock()
        deadline = entered + timeout
        self._set(generation=generation, running=False)
        with self._news:
            while True:
                fresh = {
                    i: report
                    for i, (report, at) in self._heard.items()
                    if at >= entered and report.ended is None
                }
                highest = max((r.generation for r in fresh.values()), default=generation)
                if highest > self._me.generation:
                    log.info("a peer is at generation %d: going there", highest)
                    self._me = dataclasses.replace(
                        self._me, generation=highest, failed="", exited=False
                    )
                    self._wake.set()
                current = self._me.generation
                finished = sorted(
                    i for i, (report, _) in self._heard.items()
                    if report.ended == contract.EXIT_OK
                )  # fmt: skip
                if finished:
                    raise PeerFinished(finished)
                behind = [i for i in self._peers if not self._here(fresh.get(i), current)]
                if not behind or self._repeated():
                    return current
                remaining = deadline - self._clock()
                if remaining <= 0:
                    raise RendezvousTimeout(
                        f"peers {', '.join(self._describe(i) for i in behind)} never reached "
                        f"generation {current} within {timeout:g}s (their control port is the "
                        f"TensorFlow port + {contract.CONTROL_PORT_OFFSET}). Their pods may "
                        "not be scheduled or running, or the headless Service / DNS name does "
                        "not match TF_CONFIG"
                    )
                self._news.wait(min(remaining, POLL_SECONDS))

    def _here(self, report: Report | None, generation: int) -> bool:
        """Has this peer reached `generation`? One that runs it without us (started before
        we were, as a new wrapper, here) is about to move on: not yet."""
        if report is None or report.generation < generation:
            return False
        return not report.running or self._me.incarnation in report.members

    def begin(self, generation: int) -> None:
        """The program of `generation` starts: a peer replaced from now on stops it."""
        with self._news:
            self.moved_on.clear()
            self._members = {i: report.incarnation for i, (report, _) in self._heard.items()}
            self._me = dataclasses.replace(
                self._me,
                generation=generation,
                running=True,
                members=tuple(self._members.values()),
            )
            self._check_moved_on()
        self._wake.set()

    def leave(self, failed: str, exited: bool = False) -> int:
        """The program stopped or failed (`failed`: its error line; `exited`: with an error
        code); the next generation."""
        with self._news:
            highest = max((r.generation for r, _ in self._heard.values()), default=0)
            following = max(self._me.generation + 1, highest)
            self._me = dataclasses.replace(
                self._me,
                generation=following,
                running=False,
                failed=failed,
                exited=exited,
                members=(),
            )
        self._wake.set()
        return following

    def settle_seconds(self) -> float:
        """How long the running program may still end by itself once the group moved on:
        SETTLE_SECONDS after a peer's program exited with an error, else 0."""
        with self._news:
            current = self._me.generation
            erred = any(r.exited and r.generation > current for r, _ in self._heard.values())
        return SETTLE_SECONDS if erred else 0.0

    def failures(self) -> list[tuple[int, str]]:
        """At a barrier just passed: (worker, error line) of every worker whose program
        failed by itself in the previous generation, this one's included."""
        with self._news:
            current = self._me.generation
            reports = [self._me, *(report for report, _ in self._heard.values())]
            return sorted(
                (r.worker, r.failed) for r in reports if r.failed and r.generation == current
            )

    def repeated(self) -> str:
        """At a barrier just passed: the error line when every worker's program failed by
        itself with it in the previous generation, else ""."""
        with self._news:
            return self._repeated()

    def _repeated(self) -> str:
        """`repeated`, with the lock held. A peer that saw it first may have left already:
        its last report still counts. Only the program's own exception counts
        (`exit_policy.own_program_error`, the reading `tflaunch wait`, the operator and `tflaunch
        local` share): TensorFlow's word for a lost peer is the same on every survivor of a
        group fault, which a restart may fix."""
        failed = self._me.failed
        reports = [report for report, _ in self._heard.values()]
        same = all(r.failed == failed and r.generation == self._me.generation for r in reports)
        repeats = (
            same and len(reports) == len(self._peers) and exit_policy.own_program_error(failed)
        )
        return failed if repeats else ""

    def end(self, code: int) -> None:
        """The wrapper leaves with `code`: every peer is told once, then the port closes."""
        self._set(running=False, ended=code)
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=5.0)
        # All at once: a peer whose pod is gone costs a connect timeout, not one per peer.
        farewells = [
            threading.Thread(target=self._exchange, args=(worker,), daemon=True)
            for worker in self._peers
        ]
        for thread in farewells:
            thread.start()
        for thread in farewells:
            thread.join(timeout=EXCHANGE_TIMEOUT_SECONDS * 2)
        self._socket.close()

    # --- the threads ---------------------------------------------------------------------

    def _set(self, **changes: object) -> None:
        with self._news:
            self._me = dataclasses.replace(self._me, **changes)  # type: ignore[arg-type]
        self._wake.set()

    def _describe(self, worker: int) -> str:
        """The peer, where it was last heard, or why it never answered (its DNS name not
        resolved yet, its port refusing), as the rendezvous without restart in place says."""
        host, port = self._peers[worker]
        heard = self._heard.get(worker)
        if heard:
            where = f"at generation {heard[0].generation}"
        else:
            why = preflight.probe(f"{host}:{port}", EXCHANGE_TIMEOUT_SECONDS)
            where = f"never answered: {why}" if why else "never answered"
        return f"worker {worker} ({host}:{port}, {where})"

    def _heard_from(self, report: Report) -> None:
        if report.worker not in self._peers:
            return
        with self._news:
            self._heard[report.worker] = (report, self._clock())
            self._check_moved_on()
            self._news.notify_all()

    def _check_moved_on(self) -> None:
        """With the lock held: has the group left the running generation?"""
        if not self._me.running:
            return
        for worker, (report, _) in self._heard.items():
            replaced = self._members.get(worker, report.incarnation) != report.incarnation
            if report.generation > self._me.generation or replaced:
                if not self.moved_on.is_set():
                    why = "was replaced" if replaced else f"is at generation {report.generation}"
                    log.warning("worker %d %s: stopping this generation's program", worker, why)
                self.moved_on.set()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except (TimeoutError, OSError):
                continue
            with connection, contextlib.suppress(OSError):
                connection.settimeout(EXCHANGE_TIMEOUT_SECONDS)
                report = Report.from_line(_read_line(connection))
                connection.sendall(self.me.to_line())
                if report is not None:
                    self._heard_from(report)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(RUNNING_POLL_SECONDS if self.me.running else POLL_SECONDS)
            self._wake.clear()
            for worker in self._peers:
                if self._stop.is_set():
                    return
                self._exchange(worker)

    def _exchange(self, worker: int) -> None:
        try:
            with socket.create_connection(
                self._peers[worker], timeout=EXCHANGE_TIMEOUT_SECONDS
            ) as connection:
                connection.sendall(self.me.to_line())
                report = Report.from_line(_read_line(connection))
        except OSError:
            return  # not there yet, or gone: asked again at the next poll
        if report is not None:
            self._heard_from(report)
