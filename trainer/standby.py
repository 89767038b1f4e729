"""A warm standby for restarts in place: the next generation's Python interpreter, started
while this generation trains, with TensorFlow already imported.

A restart in place relaunches the program (`trainer.run`), and its first seconds go to
Python and `import tensorflow` (4.8 s on the project's 2-core machine, docs/performance.md).
A standby is an interpreter started `--standby-after` seconds into a generation: it imports
the `--standby-imports` modules, then waits on its stdin. At the next restart the wrapper
sends it the program and the generation's environment, and it runs the program as `python`
would: `runpy` for `-m MODULE` and `SCRIPT`, `exec` in `__main__` for `-c CODE`, with
`sys.argv` and `sys.path[0]` as Python sets them.

Only a command that starts a Python interpreter directly (`python`, `python3`,
`/usr/bin/python3.11` ..., with no option but `-u`) gets one; anything else starts cold. A
standby holds its imports' private memory (about 220 MB for TensorFlow on CPU), so it is
started only with HEADROOM_BYTES free below the container's memory limit. Unlike a cold
start, the imports ran before the program: a program that sets an import-time variable
(TF_CPP_MIN_LOG_LEVEL) itself, before importing TensorFlow, finds it imported already;
`TFLAUNCH_STANDBY_IMPORTS=""` turns standbys off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from launcher.core import contract
from trainer.child import die_with_parent

log = logging.getLogger("tflaunch.worker")

ENV_IMPORTS = contract.ENV_STANDBY_IMPORTS
DEFAULT_IMPORTS = "tensorflow"
DEFAULT_AFTER_SECONDS = 10.0
"""A generation's own start (its import, MWMS, the first trace) is over by then on a
training node, so the standby's import does not slow it down."""
HEADROOM_BYTES = 1 << 30
"""Free memory below the container's limit needed to start a standby: its ~220 MB, and
room for the program to grow."""
PROCESS_NAME = "tflaunch-standb"
"""A waiting standby's /proc/PID/comm (15 characters at most): the program it later runs
takes the interpreter's name back."""
_INTERPRETER = re.compile(r"python(\d+(\.\d+)*)?")

# Runs under the program's own interpreter: plain Python, no tflaunch import. Everything
# in a function, so the program's `__main__` (a `-c` program's globals) starts clean.
BOOTSTRAP = r"""
def _standby():
    import ctypes, importlib, json, os, sys
    def call_me(name):  # /proc/PID/comm, what ps shows: a waiting standby is told apart
        try:
            ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
        except Exception:
            pass
    try:
        with open("/proc/self/comm") as comm:
            own_name = comm.read().strip()
    except OSError:
        own_name = ""
    call_me("STANDBY_NAME")
    for name in filter(None, sys.argv[1].split(",")):
        try:
            importlib.import_module(name)
        except BaseException:
            pass  # the program's own import says what is wrong, where it belongs
    line = sys.stdin.buffer.readline()
    if not line.strip():
        sys.exit(0)  # discarded unused
    order = json.loads(line)
    if own_name:
        call_me(own_name)
    os.environ.clear()
    os.environ.update(order["env"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    kind, target, args = order["kind"], order["target"], order["args"]
    main = sys.modules["__main__"].__dict__
    del main["_standby"]
    if kind == "code":
        sys.argv = ["-c", *args]
        exec(compile(target, "<string>", "exec"), main)
        return
    import runpy
    if kind == "module":
        sys.argv = [target, *args]
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.realpath(target))
        runpy.run_path(target, run_name="__main__")
_standby()
""".replace("STANDBY_NAME", PROCESS_NAME)


@dataclasses.dataclass(frozen=True)
class PythonLaunch:
    """`python [-u] (-m MODULE | -c CODE | SCRIPT) ARGS...`, taken apart."""

    interpreter: str
    flags: tuple[str, ...]
    kind: str  # "module", "code" or "script"
    target: str
    args: tuple[str, ...]


def python_launch(command: Sequence[str]) -> PythonLaunch | None:
    """`command` as a Python launch a standby can run, or None (it starts cold)."""
    if not command or not _INTERPRETER.fullmatch(os.path.basename(command[0])):
        return None
    flags: list[str] = []
    rest = list(command[1:])
    while rest and rest[0] == "-u":
        flags.append(rest.pop(0))
    if not rest:
        return None
    if rest[0] in ("-m", "-c"):
        if len(rest) < 2:
            return None
        kind = "module" if rest[0] == "-m" else "code"
        return PythonLaunch(command[0], tuple(flags), kind, rest[1], tuple(rest[2:]))
    if rest[0].startswith("-"):
        return None  # an interpreter option the standby would have to copy
    return PythonLaunch(command[0], tuple(flags), "script", rest[0], tuple(rest[1:]))


def memory_headroom(cgroup: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes below this container's memory limit (cgroup v2, else v1); None: no limit."""
    for limit_file, usage_file in (
        ("memory.max", "memory.current"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"),
    ):
        try:
            limit = (cgroup / limit_file).read_text().strip()
            usage = int((cgroup / usage_file).read_text())
        except (OSError, ValueError):
            continue
        if limit == "max" or int(limit) >= 1 << 60:  # v1 says "no limit" with a huge number
            return None
        return int(limit) - usage
    return None


class Standby:
    """At most one standby at a time, for this worker's next generation.

    Standbys are started by one thread that lives until `close`: a child's parent-death
    signal (`die_with_parent`) follows the thread that started it, not the process.
    """

    def __init__(
        self, command: Sequence[str], imports: str, after: float,
        headroom: Callable[[], int | None] = memory_headroom,
    ) -> None:  # fmt: skip
        self._launch = python_launch(command) if imports.strip(", ") else None
        self._imports = imports
        self._after = after
        self._headroom = headroom
        self._changed = threading.Condition()
        self._wanted: tuple[float, dict[str, str]] | None = None
        self._ready: subprocess.Popen[bytes] | None = None
        self._closed = False
        self._starter: threading.Thread | None = None

    @property
    def possible(self) -> bool:
        return self._launch is not None

    def schedule(self, env: Mapping[str, str]) -> None:
        """A standby in `after` seconds, started with `env` (the running generation's)."""
        if self._launch is None:
            return
        with self._changed:
            if self._closed:
                return
            self._wanted = (time.monotonic() + self._after, dict(env))
            if self._starter is None:
                self._starter = threading.Thread(target=self._start_when_due, daemon=True)
                self._starter.start()
            self._changed.notify()

    def _start_when_due(self) -> None:
        with self._changed:
            while not self._closed:
                if self._wanted is None or self._ready is not None:
                    self._changed.wait()
                    continue
                due, env = self._wanted
                if time.monotonic() < due:
                    self._changed.wait(due - time.monotonic())
                    continue
                self._wanted = None
                self._ready = self._start(env)

    def _start(self, env: dict[str, str]) -> subprocess.Popen[bytes] | None:
        assert self._launch is not None
        free = self._headroom()
        if free is not None and free < HEADROOM_BYTES:
            log.info(
                "no standby for the next restart: %d MB free below the memory limit, %d MB needed",
                free >> 20,
                HEADROOM_BYTES >> 20,
            )
            return None
        launch = self._launch
        try:
            return subprocess.Popen(
                [launch.interpreter, *launch.flags, "-c", BOOTSTRAP, self._imports],
                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=die_with_parent,
            )  # fmt: skip
        except OSError as e:  # the cold start will say it, in the program's words
            log.info("no standby for the next restart: %s", e)
            return None

    def take(self, env: Mapping[str, str]) -> subprocess.Popen[bytes] | None:
        """The standby, told to run the program with `env`; None when there is none."""
        with self._changed:
            self._wanted = None
            process, self._ready = self._ready, None
        if process is None or self._launch is None:
            return None
        if process.poll() is not None:  # it died waiting (OOM, a signal): a cold start
            _discard(process)
            return None
        launch = self._launch
        order = {"kind": launch.kind, "target": launch.target, "args": list(launch.args)}
        line = json.dumps({**order, "env": dict(env)}).encode() + b"\n"
        assert process.stdin is not None
        try:
            process.stdin.write(line)
            process.stdin.close()
            process.stdin = None  # as if started without one: nothing more goes in
        except OSError:  # it died just now
            _discard(process)
            return None
        return process

    def close(self) -> None:
        """No more generations: the standby, if any, is stopped, and no other starts."""
        with self._changed:
            self._closed = True
            process, self._ready = self._ready, None
            self._changed.notify()
        if process is not None:
            _discard(process)


def _discard(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
