"""Keep `tflaunch local`'s workers off the network, and never let one outlive the launcher.

TensorFlow's gRPC server (what MWMS workers talk through) listens on every interface
whatever host TF_CONFIG names, and offers no bind address: an unauthenticated TensorFlow
server reachable by anyone who can reach this machine. The workers only need loopback to
talk to each other (MNIST is found or downloaded by the launcher before they start), so the
whole group runs in one private network namespace that has nothing but loopback: a
short-lived child (`python -m launcher.local.isolation`) creates it (as root a plain network
namespace; otherwise inside a user namespace that maps only our own uid and gid, where the
kernel allows unprivileged ones) and brings `lo` up; the launcher keeps it open by file
descriptor, and every worker joins it with setns(2) between fork and exec. Where no
namespace can be made, the run goes on and says so once.

Every worker also gets PR_SET_PDEATHSIG=SIGKILL before exec (and exits at once if the
launcher already died), so `kill -9` of the launcher ends the group; the worker wrapper
does the same for its program. Linux only; elsewhere both are off and the run says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import re
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
NETWORK_CHOICES = ("private", "host")
"""`tflaunch local --network`: private (the default) or this machine's own network."""
READY = "ready"


def _libc() -> Any:
    """The C library's functions through ctypes (None off Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


# --- the holder: runs as its own process -------------------------------------------------


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as file:
        file.write(text)


def _new_namespace(libc: Any) -> str:
    """Move this process into a new network namespace; "net" or "user" (one made inside a
    new user namespace mapping only our uid and gid, for a user without CAP_SYS_ADMIN)."""
    if libc.unshare(CLONE_NEWNET) == 0:
        return "net"
    uid, gid = os.geteuid(), os.getegid()
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET), "unshare(user and network namespace)")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    return "user"


def _loopback_up() -> None:
    """`ip link set lo up`, without needing iproute2: a new namespace's lo is down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        (flags,) = struct.unpack_from("H", fcntl.ioctl(sock, SIOCGIFFLAGS, request), 16)
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def holder_main() -> int:
    """Create the namespace, say "ready net|user" on stdout, then keep it until stdin ends
    (the launcher has opened it, or died)."""
    libc = _libc()
    try:
        if libc is None:
            raise OSError("not Linux")
        kind = _new_namespace(libc)
        _loopback_up()
    except OSError as e:
        print(f"error {e.strerror or e}", flush=True)
        return 1
    print(f"{READY} {kind}", flush=True)
    with contextlib.suppress(OSError, KeyboardInterrupt):
        sys.stdin.buffer.read()
    return 0


# --- the launcher's side -----------------------------------------------------------------


class Isolation:
    """What each worker does between fork and exec: join the group's namespace (if any),
    then die with the launcher. The namespace lives as long as these file descriptors
    (and the workers in it): no process needs to hold it."""

    def __init__(self, fds: Sequence[tuple[int, int]] = (), warning: str = "") -> None:
        self._fds = list(fds)
        """(fd of /proc/PID/ns/KIND, its CLONE_NEW* type), the user namespace first."""
        self.warning = warning
        """Why the workers share this machine's network ("": they do not)."""
        self._libc = _libc()

    @property
    def private(self) -> bool:
        return bool(self._fds)

    def preexec(self) -> Callable[[], None]:
        """The child's last steps before exec (everything it calls was resolved here, in
        the parent: after fork only this thread exists)."""
        libc, fds, parent = self._libc, list(self._fds), os.getpid()
        setns = libc.setns if libc is not None else None
        prctl = libc.prctl if libc is not None else None
        getppid, kill, getpid = os.getppid, os.kill, os.getpid

        def in_child() -> None:
            for fd, nstype in fds:
                assert setns is not None
                _check(setns(fd, nstype), "setns")
            if prctl is not None:
                prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
            if getppid() != parent:  # the launcher died before the line above
                kill(getpid(), signal.SIGKILL)

        return in_child

    def close(self) -> None:
        for fd, _ in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()


def _make_namespace() -> tuple[list[tuple[int, int]], str]:
    """([(fd, type), ...], "") for a new namespace, or ([], why none could be made).

    A short-lived child makes it (`holder_main`) and waits while this process opens its
    namespaces; then it exits, so that the workers are this process's only children."""
    if _libc() is None:
        return [], "this system has no network namespaces (Linux only)"
    holder = subprocess.Popen(
        [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdin is not None
    fds: list[tuple[int, int]] = []
    try:
        answer = holder.stdout.readline().decode(errors="replace").split(maxsplit=1)
        if answer[:1] == [READY] and len(answer) == 2:
            kinds = [("user", CLONE_NEWUSER)] if answer[1].strip() == "user" else []
            for name, nstype in (*kinds, ("net", CLONE_NEWNET)):
                path = f"/proc/{holder.pid}/ns/{name}"
                fds.append((os.open(path, os.O_RDONLY | os.O_CLOEXEC), nstype))
            return fds, ""
        reason = answer[1].strip() if len(answer) == 2 else "no answer"
        return [], f"cannot create a private network namespace ({reason})"
    except OSError as e:
        for fd, _ in fds:
            os.close(fd)
        return [], f"cannot open the private network namespace ({e.strerror or e})"
    finally:
        holder.stdout.close()
        with contextlib.suppress(OSError):
            holder.stdin.close()
        holder.wait()


def _joinable(isolation: Isolation) -> str:
    """Why a child cannot join the namespace ("": it can)."""
    try:
        subprocess.run(
            [sys.executable, "-S", "-c", ""], preexec_fn=isolation.preexec(), check=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as e:
        return f"cannot join the private network namespace ({e})"
    return ""


@contextlib.contextmanager
def isolated(network: str = "private") -> Iterator[Isolation]:
    """The group's isolation for one `tflaunch local` run (across its restarts)."""
    if network != "private":
        isolation = Isolation(warning="--network host")
    else:
        fds, warning = _make_namespace()
        isolation = Isolation(fds, warning)
        if isolation.private:
            warning = _joinable(isolation)
            if warning:
                isolation.close()
                isolation = Isolation(warning=warning)
    try:
        yield isolation
    finally:
        isolation.close()


def network_warning(isolation: Isolation) -> str | None:
    """The one line a run prints when its workers are reachable from the network."""
    if isolation.private:
        return None
    return (
        f"tflaunch: warning: the workers share this machine's network ({isolation.warning}): "
        "TensorFlow's gRPC servers listen on every interface, unauthenticated, so anyone "
        "who can reach this machine can talk to them while they train; see docs/security.md"
    )


NO_NETWORK = re.compile(
    r"name resolution|Name or service not known|No address associated with hostname|"
    r"nodename nor servname|Network is unreachable|Could not resolve host",
    re.IGNORECASE,
)
"""What a program prints when it tries to reach the network and only loopback is there."""


def no_network_hint(failure: str, isolation: Isolation) -> str:
    """Why a worker's download or remote storage failed, when the private namespace is the
    likely reason ("" otherwise): the same error online and offline, so say which it is."""
    if not isolation.private or not NO_NETWORK.search(failure):
        return ""
    return (
        "; the workers run in a private network namespace with only loopback: "
        "`tflaunch local --network host` gives them this machine's network"
    )


if __name__ == "__main__":
    sys.exit(holder_main())
