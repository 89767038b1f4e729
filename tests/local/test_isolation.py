"""`tflaunch local` keeps its workers off the network and never lets one outlive it.

Real `tflaunch local` processes running a plain Python program (no TensorFlow) that does
what TensorFlow's gRPC server does: listen on every interface (0.0.0.0) on its TF_CONFIG
port. Connections go only to this machine's own addresses (`ip -4 addr`).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.local import isolation

# Listens like TensorFlow's GrpcServer (every interface), says where, then waits for `stop`.
_LISTENS_EVERYWHERE = """\
import json, os, pathlib, socket, time
task = json.loads(os.environ["TF_CONFIG"])
port = int(task["cluster"]["worker"][task["task"]["index"]].rsplit(":", 1)[1])
server = socket.create_server(("0.0.0.0", port))
out = pathlib.Path(os.environ["LISTEN_OUT"])
(out / f"port-{task['task']['index']}").write_text(f"{port} {os.getpid()}")
while not (out / "stop").exists():
    time.sleep(0.2)
"""


def _own_addresses() -> list[str]:
    """This machine's IPv4 addresses other than loopback."""
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command to list this machine's addresses")
    text = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    addresses = [a for a in re.findall(r"inet (\d+\.\d+\.\d+\.\d+)", text) if a[:4] != "127."]
    if not addresses:
        pytest.skip("this machine has no non-loopback IPv4 address to connect to")
    return addresses


def _connects(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=5):
            return True
    except OSError as e:
        assert e.errno in (errno.ECONNREFUSED, errno.ETIMEDOUT, None), e
        return False


def _start(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / "listen.py"
    script.write_text(_LISTENS_EVERYWHERE)
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, "-m", "launcher", "local", "--script", str(script),
               "--workers", "2", "--workdir", str(tmp_path / "run"), *flags]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        stdin=subprocess.DEVNULL, env={**os.environ, "LISTEN_OUT": str(out)},
    )  # fmt: skip
    return process, out


def _listening(out: Path, process: subprocess.Popen[str]) -> list[tuple[int, int]]:
    """(port, pid) of both workers once they listen (the run must still be going)."""
    deadline = time.monotonic() + 180
    files = [out / "port-0", out / "port-1"]
    while not all(f.exists() and f.read_text() for f in files):
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "the workers never started listening"
        time.sleep(0.2)
    return [tuple(int(x) for x in f.read_text().split()) for f in files]  # type: ignore[misc]


def _finish(process: subprocess.Popen[str], out: Path) -> str:
    (out / "stop").write_text("")
    try:
        stdout, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return stdout


def test_workers_listening_on_every_interface_cannot_be_reached_from_the_network(tmp_path):
    addresses = _own_addresses()
    process, out = _start(tmp_path)
    try:
        workers = _listening(out, process)
        for port, _ in workers:
            for address in addresses:
                assert not _connects(address, port), f"worker port {port} open on {address}"
            # Not even this machine's own loopback reaches them: they have their own.
            assert not _connects("127.0.0.1", port)
    finally:
        stdout = _finish(process, out)
    assert process.returncode == 0, stdout
    assert "share this machine's network" not in stdout, stdout


def test_with_the_hosts_network_the_same_workers_are_reachable_and_the_run_says_so(tmp_path):
    """The check above can fail: on this machine's network, the same listener answers."""
    addresses = _own_addresses()
    process, out = _start(tmp_path, "--network", "host")
    try:
        workers = _listening(out, process)
        assert all(_connects(addresses[0], port) for port, _ in workers)
    finally:
        stdout = _finish(process, out)
    assert process.returncode == 0, stdout
    assert stdout.count("tflaunch: warning: the workers share this machine's network") == 1
    assert "--network host" in stdout


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, not yet reaped


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = {int(p) for p in (task / "children").read_text().split()}
            except FileNotFoundError:
                continue
            todo.extend(children - found)
            found |= children
    return found


@pytest.mark.parametrize("network", ["private", "host"])
def test_kill_9_of_the_launcher_ends_every_worker(tmp_path, network):
    process, out = _start(tmp_path, "--network", network)
    try:
        workers = _listening(out, process)
        group = _descendants(process.pid)
        assert {pid for _, pid in workers} <= group  # the programs, under their wrappers
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        deadline = time.monotonic() + 60
        while any(_alive(pid) for pid in group) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in group if _alive(pid)], "workers outlived the launcher"
    finally:
        (out / "stop").write_text("")
        process.kill()
        process.wait()


def test_a_system_without_namespaces_runs_on_the_hosts_network_with_one_warning(monkeypatch):
    monkeypatch.setattr(isolation, "_libc", lambda: None)
    with isolation.isolated("private") as group:
        assert not group.private
        warning = isolation.network_warning(group)
    assert warning is not None and "Linux only" in warning


def test_the_namespace_outlives_its_short_lived_maker_and_has_loopback_up():
    """The child that made it is gone (the workers are the launcher's only children), yet a
    process joins the namespace and finds loopback up and nothing else."""
    import subprocess as sp

    with isolation.isolated("private") as group:
        assert group.private
        makers = [
            pid
            for pid in _descendants(os.getpid())
            if b"launcher.local.isolation" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        assert makers == []  # fmt: skip
        script = (
            "import socket\n"
            "s = socket.create_server(('127.0.0.1', 0)); port = s.getsockname()[1]\n"
            "socket.create_connection(('127.0.0.1', port), 2).close()\n"
            "print(open('/proc/net/dev').read())\n"
        )
        ran = sp.run([sys.executable, "-c", script], preexec_fn=group.preexec(),
                     capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    interfaces = {line.split(":")[0].strip() for line in ran.stdout.splitlines()[2:] if line}
    assert interfaces == {"lo"}


_REACHES_OUT = """\
import socket
socket.create_connection(("192.0.2.1", 443), timeout=5)  # TEST-NET-1: never answers
"""


@pytest.mark.parametrize("network", ["private", "host"])
def test_a_program_that_reaches_for_the_network_is_told_why_it_cannot(tmp_path, network):
    """Online or offline, a download from a worker fails the same way in the private
    namespace; the final line says it is the namespace, and `--network host` the way out.
    With `--network host` the failure is the machine's own, and the line does not say so."""
    script = tmp_path / "download.py"
    script.write_text(_REACHES_OUT)
    run = subprocess.run(
        [sys.executable, "-m", "launcher", "local", "--script", str(script), "--workers", "2",
         "--workdir", str(tmp_path / "run"), "--network", network],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert run.returncode != 0
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("tflaunch: error:")]
    hinted = "private network namespace with only loopback" in line
    if network == "private":
        assert "Network is unreachable" in line and hinted, line
        assert "--network host" in line
    else:
        assert not hinted, line


@pytest.mark.parametrize(
    ("failure", "hinted"),
    [("URLError: <urlopen error [Errno -3] Temporary failure in name resolution>", True),
     ("gaierror: [Errno -2] Name or service not known", True),
     ("curl: (6) Could not resolve host: example.com", True),
     ("ValueError: bad batch", False)],
)  # fmt: skip
def test_only_network_errors_in_a_private_namespace_get_the_hint(failure, hinted):
    private = isolation.Isolation(fds=[(-1, 0)])  # only `private` is read
    assert bool(isolation.no_network_hint(failure, private)) is hinted
    assert isolation.no_network_hint(failure, isolation.Isolation()) == ""
