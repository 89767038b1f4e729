"""One `tflaunch local` run per workdir (issue 38 item 4): a second run on a workdir in use is
exit 2 naming the running one's pid and --workdir, before any worker starts; a lock left by a
killed run does not block."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

HOLD = """
import sys, time
from pathlib import Path
from launcher.local import workdir_lock
with workdir_lock.held(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(120)
"""


def hold(workdir: Path) -> subprocess.Popen[str]:
    """A process holding `workdir`'s lock, as a running `tflaunch local` does."""
    workdir.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(workdir)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def local(script: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", "local", "--script", str(script), "--workers", "1",
         "--workdir", str(workdir)],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_second_run_on_a_workdir_in_use_is_refused_naming_the_pid(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    marker = tmp_path / "ran"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    workdir = tmp_path / "run"
    holder = hold(workdir)
    try:
        run = local(script, workdir)
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 2, run.stderr
    error = run.stderr.strip().splitlines()[-1]
    assert f"pid {holder.pid}" in error and "--workdir" in error, run.stderr
    assert "Traceback" not in run.stderr
    assert not marker.exists()  # no worker started
    assert not (workdir / "script").exists()  # and nothing of the running one's overwritten


def test_a_lock_left_by_a_killed_run_does_not_block_the_next(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    workdir = tmp_path / "run"
    holder = hold(workdir)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert (workdir / ".tflaunch.lock").exists()
    run = local(script, workdir)
    assert run.returncode == 0, run.stderr
    assert "succeeded" in run.stdout, run.stdout
