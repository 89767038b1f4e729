"""`tflaunch local` finds or fetches MNIST once, before any worker starts."""

from __future__ import annotations

import hashlib
import http.server
import threading
from pathlib import Path

import pytest

from launcher.cli.main import run
from launcher.core import contract
from launcher.core.errors import SpecError
from launcher.local import dataset


@pytest.fixture
def keras_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    return tmp_path / "keras"


@pytest.fixture
def served(tmp_path):
    """A loopback HTTP server serving tmp_path/www; yields its base URL."""
    root = tmp_path / "www"
    root.mkdir()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_explicit_data_and_the_env_var_win_over_everything(keras_home):
    assert dataset.resolve_mnist("/a.npz", {contract.ENV_DATA: "/b.npz"}) == "/a.npz"
    assert dataset.resolve_mnist(None, {contract.ENV_DATA: "/b.npz"}) == "/b.npz"


def test_keras_cache_is_used_without_downloading(keras_home):
    cached = keras_home / "datasets" / "mnist.npz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"x")
    unreachable = {contract.ENV_MNIST_URL: "http://127.0.0.1:9/never"}
    assert dataset.resolve_mnist(None, unreachable) == str(cached)


def test_a_verified_download_lands_in_the_keras_cache(keras_home, served):
    root, url = served
    payload = b"pretend this is mnist.npz"
    (root / "mnist.npz").write_bytes(payload)
    dest = keras_home / "datasets" / "mnist.npz"
    dataset.download(f"{url}/mnist.npz", dest, hashlib.sha256(payload).hexdigest())
    assert dest.read_bytes() == payload


def test_a_corrupt_download_leaves_nothing_behind(keras_home, served):
    root, url = served
    (root / "mnist.npz").write_bytes(b"truncated")
    dest = keras_home / "datasets" / "mnist.npz"
    with pytest.raises(SpecError) as caught:
        dataset.download(f"{url}/mnist.npz", dest, contract.MNIST_SHA256)
    assert "sha256" in str(caught.value)
    assert list(dest.parent.iterdir()) == []


def test_offline_local_run_fails_before_starting_workers_in_one_line(
    keras_home, monkeypatch, capsys, tmp_path
):
    monkeypatch.delenv(contract.ENV_DATA, raising=False)
    monkeypatch.setenv(contract.ENV_MNIST_URL, "http://127.0.0.1:9/mnist.npz")
    assert run(["local", "--workdir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "--data" in err and "make sample-data" in err
    assert not (tmp_path / "run").exists()
