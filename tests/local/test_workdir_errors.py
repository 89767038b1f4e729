"""A workdir tflaunch local cannot write is one line, exit 2, before any worker starts (issue
27 item 17): not an internal error."""

from __future__ import annotations

import dataclasses
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.api.spec import Script
from launcher.core.errors import SpecError
from launcher.core.load import load_job
from launcher.local import runner


def test_a_workdir_under_proc_is_one_line_and_exit_2(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    run = subprocess.run(
        [sys.executable, "-m", "launcher", "local", "--script", str(script), "--workers", "1",
         "--workdir", "/proc/tflaunch-x"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and "--workdir" in run.stderr, run.stderr


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_full_or_read_only_disk_at_start_is_one_line(tmp_path, monkeypatch, code):
    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code), str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    job = load_job(None, [("spec.workers", 1)])
    job = dataclasses.replace(
        job, spec=dataclasses.replace(job.spec, script=Script("t.py", "print(1)\n"))
    )
    with pytest.raises(SpecError) as caught:
        runner.run_local(job, tmp_path / "run", write=lambda _: None)
    assert caught.value.field == "--workdir"
    assert os.strerror(code) in caught.value.message
