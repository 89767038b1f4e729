"""Fixtures for the trainer suite: generated MNIST data and real worker processes.

Keras' MNIST download needs internet, which CI does not have, so the data is generated
(`trainer.synthetic`): small, learnable, in Keras' npz format. Multi-worker tests run
`python -m trainer` as real subprocesses on loopback with free ports, exactly as
`tflaunch local` does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from launcher.core import contract

# In-process tests import TensorFlow (model, data pipelines): tf-keras must be selected
# before the first import, exactly as in `python -m trainer`.
os.environ[contract.ENV_LEGACY_KERAS] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from trainer.synthetic import make_mnist_like

REPO = Path(__file__).resolve().parents[2]
SHA_LINE = re.compile(r"weights sha256 ([0-9a-f]{64})")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "tf: runs real TensorFlow processes (seconds each)")


@pytest.fixture(scope="session")
def mnist_npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2048 train / 512 test images of 10 learnable classes, in Keras' mnist.npz format."""
    path = tmp_path_factory.mktemp("data") / "mnist.npz"
    np.savez(path, **make_mnist_like(train=2048, test=512, seed=0))
    return path


def free_ports(count: int) -> list[int]:
    """Ports nobody listens on right now (bound, read, released together)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(addresses: Sequence[str], index: int) -> str:
    return json.dumps(
        {"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": index}}
    )


@dataclasses.dataclass
class Worker:
    """One `python -m trainer` process whose output goes to files (never a full pipe)."""

    index: int
    process: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path
    started: float

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def wait_for_log(self, pattern: str, timeout: float) -> None:
        """Block until `pattern` appears in stderr; fail if the worker exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.stderr):
                return
            if self.process.poll() is not None:
                pytest.fail(f"worker {self.index} exited before {pattern!r}:\n{self.stderr}")
            time.sleep(0.1)
        pytest.fail(f"worker {self.index} never logged {pattern!r}:\n{self.stderr}")

    def result(self) -> dict[str, object]:
        """The chief's TFLAUNCH_RESULT line, parsed."""
        lines = [
            line
            for line in self.stdout.splitlines()
            if line.startswith(contract.RESULT_LINE_PREFIX)
        ]
        assert len(lines) == 1, f"expected one result line:\n{self.stdout}\n{self.stderr}"
        parsed: dict[str, object] = json.loads(lines[0][len(contract.RESULT_LINE_PREFIX) :])
        return parsed

    def weights_sha256(self) -> str:
        match = SHA_LINE.search(self.stderr)
        assert match, f"worker {self.index} logged no weights digest:\n{self.stderr}"
        return match.group(1)


Spawn = Callable[..., Worker]


def spawner(directory: Path, started: list[Worker]) -> Spawn:
    """Start `python -m trainer ARGS` in `directory` with a clean environment.

    HOME points into `directory` so that Keras' cache (~/.keras/datasets) is empty.
    """

    def start(
        args: Sequence[str],
        *,
        index: int = 0,
        tf_config: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Worker:
        environment = {
            key: value
            for key, value in os.environ.items()
            if key
            not in (
                contract.ENV_TF_CONFIG,
                contract.ENV_DATA,
                contract.ENV_RESTARTS,
                contract.ENV_WORKER_INDEX,
            )
        }
        environment.update(
            PYTHONPATH=str(REPO), HOME=str(directory / "home"), TF_CPP_MIN_LOG_LEVEL="2"
        )
        if tf_config is not None:
            environment[contract.ENV_TF_CONFIG] = tf_config
        environment.update(env or {})
        stem = directory / f"worker{index}-{len(started)}"
        with open(f"{stem}.out", "wb") as out, open(f"{stem}.err", "wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "trainer", *args],
                cwd=directory,
                env=environment,
                stdout=out,
                stderr=err,
            )
        worker = Worker(index, process, Path(f"{stem}.out"), Path(f"{stem}.err"), time.monotonic())
        started.append(worker)
        return worker

    return start


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """`spawner` in the test's tmp_path; kills leftovers at the end."""
    started: list[Worker] = []
    yield spawner(tmp_path, started)
    for worker in started:
        worker.kill()


@pytest.fixture(scope="module")
def spawn_for_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spawn]:
    """`spawner` for module-scoped runs (one run that several tests read)."""
    started: list[Worker] = []
    yield spawner(tmp_path_factory.mktemp("workers"), started)
    for worker in started:
        worker.kill()


SpawnGroup = Callable[..., list[Worker]]


def group_spawner(spawn: Spawn) -> SpawnGroup:
    """Start N workers on loopback with free ports and one TF_CONFIG each."""

    def start(
        count: int, args: Sequence[str], env: Mapping[str, str] | None = None
    ) -> list[Worker]:
        addresses = [f"127.0.0.1:{port}" for port in free_ports(count)]
        return [
            spawn(args, index=i, tf_config=tf_config(addresses, i), env=env) for i in range(count)
        ]

    return start


@pytest.fixture
def spawn_group(spawn: Spawn) -> SpawnGroup:
    return group_spawner(spawn)


@pytest.fixture(scope="module")
def spawn_group_for_module(spawn_for_module: Spawn) -> SpawnGroup:
    return group_spawner(spawn_for_module)
