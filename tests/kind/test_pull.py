"""Images pulled by the kind nodes from a registry (issue 34): a wrong tag, a registry that does
not answer, and one that comes back, each read back by `tflaunch wait` in containerd's own
words (`launcher.core.never_starts`)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from launcher.core import never_starts
from launcher.core.errors import ExitStatus
from tests.e2e.conftest import ROOT, stop_process
from tests.kind.conftest import TRAINER, Kind, kind_sh, mnist_spec

pytestmark = pytest.mark.timeout(1200)  # image pulls and training: minutes


def test_a_wrong_tag_ends_the_wait_with_exit_5_naming_the_image_and_the_fix(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    image = f"{kind.registry}/tflaunch-trainer:nosuch"
    spec = mnist_spec(tmp_path / "job.yaml", "wrongtag", namespace, image)

    assert kind.tflaunch("submit", str(spec)).code == 0
    run = kind.tflaunch("wait", "wrongtag", "-n", namespace, "--timeout", "10m", timeout=700)

    assert run.code == ExitStatus.NEVER_STARTS, run
    error = run.err.strip().splitlines()[-1]
    assert f'will never start: image "{image}"' in error, run.err
    assert "not found" in error, run.err  # containerd's words, quoted
    assert "check the tag in spec.image" in error, run.err
    assert "lacks room" not in run.err, run.err


def test_an_unreachable_registry_warns_then_ends_the_wait_naming_the_registry(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    image = f"localhost:5999/{TRAINER}"  # nothing listens there
    spec = mnist_spec(tmp_path / "job.yaml", "noregistry", namespace, image)

    assert kind.tflaunch("submit", str(spec)).code == 0
    run = kind.tflaunch("wait", "noregistry", "-n", namespace, "--timeout", "15m", timeout=1000)

    assert run.code == ExitStatus.NEVER_STARTS, run
    warnings = [line for line in run.err.splitlines() if line.startswith("warning: worker")]
    assert warnings and "cannot pull its image" in warnings[0], run.err
    grace = never_starts.UNREACHABLE_GRACE_SECONDS
    assert warnings[0].endswith(f"the wait ends unless it starts within {int(grace // 60)}m")
    error = run.err.strip().splitlines()[-1]
    assert "cannot pull its image" in error and "connection refused" in error, run.err
    assert "the registry localhost:5999 does not answer" in error, run.err


def test_a_registry_back_within_the_grace_lets_the_job_train(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    spec = mnist_spec(
        tmp_path / "job.yaml", "registryback", namespace, kind.trainer, imagePullPolicy="Always"
    )
    kind_sh("registry", "down")
    try:
        assert kind.tflaunch("submit", str(spec)).code == 0
        wait = subprocess.Popen(
            [sys.executable, "-m", "launcher", "wait", "registryback", "-n", namespace,
             "--timeout", "15m"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=kind.env(), cwd=ROOT,
        )  # fmt: skip
        said: list[str] = []
        warned = threading.Event()

        def read() -> None:
            assert wait.stderr is not None
            for line in wait.stderr:
                said.append(line)
                if "cannot pull its image" in line:
                    warned.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert warned.wait(timeout=600), "".join(said)
    finally:
        kind_sh("registry", "up")
    try:
        wait.wait(timeout=900)
    finally:
        stop_process(wait)
    reader.join(timeout=10)
    text = "".join(said)

    assert wait.returncode == 0, text
    assert "the registry localhost:" in text and "does not answer" in text, text
    assert "job registryback succeeded" in text, text
