"""The warm standby (`trainer.standby`) with real interpreters: what it runs sees what a cold
`python` start would show it, and nothing of the standby's is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer import standby

PRELOADED = "colorsys"
"""Imported by the standbys here: small, and not imported by Python's own start."""

REPORT = """
import json, os, sys
print(json.dumps({
    "name": __name__,
    "argv": sys.argv,
    "path0": sys.path[0],
    "preloaded": "PRELOADED" in sys.modules,
    "env": os.environ.get("WHICH"),
    "stdin": sys.stdin.read(),
    "main_clean": "_standby" not in globals(),
}), flush=True)
sys.exit(int(os.environ.get("EXIT", "0")))
""".replace("PRELOADED", PRELOADED)


V1_NO_LIMIT = "9223372036854771712"
"""cgroup v1's memory limit when there is none."""


def ready(
    command: list[str], imports: str = PRELOADED, headroom: int | None = None
) -> standby.Standby:
    warm = standby.Standby(command, imports, after=0.0, headroom=lambda: headroom)
    warm.schedule({**os.environ, "WHICH": "the standby's"})
    deadline = time.monotonic() + 30
    while warm._ready is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return warm


def run(warm: standby.Standby, exit_code: int = 0) -> tuple[int, dict[str, object]]:
    process = warm.take({**os.environ, "WHICH": "the program's", "EXIT": str(exit_code)})
    assert process is not None, "no standby was ready"
    out, err = process.communicate(timeout=30)
    assert process.returncode == exit_code, err.decode()
    return process.returncode, json.loads(out.decode().splitlines()[-1])


@pytest.mark.parametrize(
    ("command", "kind", "target", "args"),
    [
        (["python", "-m", "trainer", "--epochs", "2"], "module", "trainer", ("--epochs", "2")),
        (["/usr/bin/python3.11", "-u", "train.py", "-x"], "script", "train.py", ("-x",)),
        (["python3", "-c", "print(1)", "a"], "code", "print(1)", ("a",)),
    ],
)
def test_a_python_command_is_taken_apart(
    command: list[str], kind: str, target: str, args: tuple[str, ...]
) -> None:
    launch = standby.python_launch(command)
    assert launch is not None
    assert (launch.kind, launch.target, launch.args) == (kind, target, args)


@pytest.mark.parametrize(
    "command",
    [
        ["bash", "-c", "python train.py"],
        ["python", "-O", "train.py"],
        ["python", "-m"],
        ["python"],
        ["pythonista", "train.py"],
        [],
    ],
)
def test_anything_else_starts_cold(command: list[str]) -> None:
    assert standby.python_launch(command) is None
    assert not standby.Standby(command, PRELOADED, 0.0).possible


def test_a_script_runs_in_the_standby_as_python_would_run_it(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(REPORT)
    warm = ready([sys.executable, str(script), "--epochs", "3"])
    _, seen = run(warm)
    assert seen == {
        "name": "__main__",
        "argv": [str(script), "--epochs", "3"],
        "path0": str(tmp_path),
        "preloaded": True,
        "env": "the program's",
        "stdin": "",
        "main_clean": True,
    }


def test_a_module_and_code_run_in_the_standby_and_keep_their_exit(tmp_path: Path) -> None:
    (tmp_path / "report.py").write_text(REPORT)
    saved = os.getcwd()
    os.chdir(tmp_path)  # -m finds it on the standby's working directory, as python would
    try:
        code, seen = run(ready([sys.executable, "-m", "report", "a"]), exit_code=3)
    finally:
        os.chdir(saved)
    assert code == 3
    assert seen["name"] == "__main__" and seen["argv"] == [str(tmp_path / "report.py"), "a"]
    assert seen["preloaded"] is True
    code, seen = run(ready([sys.executable, "-c", REPORT, "b"]))
    assert (seen["argv"], seen["main_clean"], seen["preloaded"]) == (["-c", "b"], True, True)


def test_a_program_that_raises_in_the_standby_fails_with_its_own_exception_line(
    tmp_path: Path,
) -> None:
    script = tmp_path / "broken.py"
    script.write_text("raise ValueError('the program broke')\n")
    process = ready([sys.executable, str(script)]).take(dict(os.environ))
    assert process is not None
    _, err = process.communicate(timeout=30)
    assert process.returncode == 1
    assert err.decode().strip().splitlines()[-1] == "ValueError: the program broke"


def test_no_standby_without_the_memory_headroom_and_none_when_turned_off(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(REPORT)
    short = standby.Standby([sys.executable, str(script)], PRELOADED, 0.0, lambda: 1 << 20)
    short.schedule(dict(os.environ))
    time.sleep(0.5)
    assert short.take(dict(os.environ)) is None
    off = standby.Standby([sys.executable, str(script)], "", 0.0)
    assert not off.possible
    off.schedule(dict(os.environ))
    assert off.take(dict(os.environ)) is None


def test_a_closed_standby_leaves_no_process(tmp_path: Path) -> None:
    warm = ready([sys.executable, "-c", "pass"])
    process = warm._ready
    assert process is not None and process.poll() is None
    warm.close()
    assert process.poll() is not None
    warm.schedule(dict(os.environ))  # after close: never another
    time.sleep(0.3)
    assert warm.take(dict(os.environ)) is None


def test_a_standby_that_died_waiting_gives_a_cold_start() -> None:
    warm = ready([sys.executable, "-c", "pass"])
    process = warm._ready
    assert process is not None
    process.kill()
    process.wait()
    assert warm.take(dict(os.environ)) is None


@pytest.mark.parametrize(
    ("files", "free"),
    [
        ({"memory.max": "max\n", "memory.current": "100\n"}, None),
        ({"memory.max": "4096\n", "memory.current": "1000\n"}, 3096),
        ({"memory/memory.limit_in_bytes": V1_NO_LIMIT, "memory/memory.usage_in_bytes": "5"}, None),
        ({"memory/memory.limit_in_bytes": "2000\n", "memory/memory.usage_in_bytes": "500\n"}, 1500),
        ({}, None),
    ],
)
def test_the_headroom_is_read_from_the_containers_cgroup(
    tmp_path: Path, files: dict[str, str], free: int | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert standby.memory_headroom(tmp_path) == free


def test_the_bootstrap_is_plain_python_for_the_programs_own_interpreter() -> None:
    compiled = subprocess.run(
        [sys.executable, "-c", "import sys; compile(sys.stdin.read(), 's', 'exec')"],
        input=standby.BOOTSTRAP, text=True, check=False,
    )  # fmt: skip
    assert compiled.returncode == 0
    assert "trainer" not in standby.BOOTSTRAP and "launcher" not in standby.BOOTSTRAP
    assert f'call_me("{standby.PROCESS_NAME}")' in standby.BOOTSTRAP


def test_a_waiting_standby_is_named_so_and_its_program_has_the_interpreters_name(
    tmp_path: Path,
) -> None:
    """`ps` (and whoever looks for the wrapper's program) tells them apart."""
    script = tmp_path / "name.py"
    script.write_text("print(open('/proc/self/comm').read().strip())\n")
    warm = ready([sys.executable, str(script)])
    process = warm._ready
    assert process is not None
    deadline = time.monotonic() + 10
    while Path(f"/proc/{process.pid}/comm").read_text().strip() != standby.PROCESS_NAME:
        assert time.monotonic() < deadline, "the standby never took its name"
        time.sleep(0.01)
    taken = warm.take(dict(os.environ))
    assert taken is not None
    out, _ = taken.communicate(timeout=30)
    cold = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert out.decode().strip() == cold.stdout.strip() != standby.PROCESS_NAME
