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
from launcher.local import dataset, runner


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


UNREACHABLE = "http://127.0.0.1:9/mnist.npz"


@pytest.fixture
def cached(keras_home) -> Path:
    """A file in Keras' cache."""
    path = keras_home / "datasets" / "mnist.npz"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x")
    return path


def test_explicit_data_wins_over_the_env_var_and_the_cache(cached):
    env = {contract.ENV_DATA: "/b.npz", contract.ENV_MNIST_URL: UNREACHABLE}
    assert dataset.resolve_mnist("/a.npz", env) == dataset.DataChoice("/a.npz")


def test_the_env_var_wins_over_the_cache(cached):
    env = {contract.ENV_DATA: "/b.npz", contract.ENV_MNIST_URL: UNREACHABLE}
    assert dataset.resolve_mnist(None, env) == dataset.DataChoice("/b.npz")


def test_keras_cache_is_used_without_downloading(cached):
    unreachable = {contract.ENV_MNIST_URL: UNREACHABLE}
    assert dataset.resolve_mnist(None, unreachable) == dataset.DataChoice(str(cached))


def test_without_a_cache_the_verified_download_is_used(keras_home, served, monkeypatch):
    root, url = served
    payload = b"pretend this is mnist.npz"
    (root / "mnist.npz").write_bytes(payload)
    monkeypatch.setattr(contract, "MNIST_SHA256", hashlib.sha256(payload).hexdigest())
    choice = dataset.resolve_mnist(None, {contract.ENV_MNIST_URL: f"{url}/mnist.npz"})
    dest = keras_home / "datasets" / "mnist.npz"
    assert choice == dataset.DataChoice(str(dest))
    assert dest.read_bytes() == payload


def test_when_nothing_else_works_the_shipped_subset_is_used_with_a_short_notice(keras_home):
    choice = dataset.resolve_mnist(None, {contract.ENV_MNIST_URL: UNREACHABLE})
    assert choice.path == contract.MNIST_SUBSET_PATH
    assert choice.notice is not None and len(choice.notice.splitlines()) == 3  # what, why, fix
    for says in (UNREACHABLE, "MNIST subset shipped with tflaunch", "make mnist", "--data"):
        assert says in choice.notice
    assert not (keras_home / "datasets" / "mnist.npz").exists()


def test_a_corrupt_download_falls_back_to_the_subset_naming_the_checksum(keras_home, served):
    root, url = served
    (root / "mnist.npz").write_bytes(b"truncated")
    choice = dataset.resolve_mnist(None, {contract.ENV_MNIST_URL: f"{url}/mnist.npz"})
    assert choice.path == contract.MNIST_SUBSET_PATH
    assert choice.notice is not None and "sha256" in choice.notice


def test_the_shipped_subset_has_the_checksum_it_was_shipped_with():
    data = Path(contract.MNIST_SUBSET_PATH).read_bytes()
    assert hashlib.sha256(data).hexdigest() == contract.MNIST_SUBSET_SHA256
    assert len(data) < 5 * 1024 * 1024  # the repository stays lean


@pytest.fixture
def corrupted_subset(tmp_path, monkeypatch) -> Path:
    """A copy of the shipped subset with one byte changed, where the launcher looks for it."""
    data = bytearray(Path(contract.MNIST_SUBSET_PATH).read_bytes())
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "mnist-subset.npz"
    path.write_bytes(bytes(data))
    monkeypatch.setattr(contract, "MNIST_SUBSET_PATH", str(path))
    return path


def test_a_corrupted_subset_is_refused(keras_home, corrupted_subset):
    with pytest.raises(SpecError, match=r"is corrupted \(sha256 [0-9a-f]{64}, expected"):
        dataset.resolve_mnist(None, {contract.ENV_MNIST_URL: UNREACHABLE})


def test_a_missing_subset_is_refused(keras_home, tmp_path, monkeypatch):
    monkeypatch.setattr(contract, "MNIST_SUBSET_PATH", str(tmp_path / "gone.npz"))
    with pytest.raises(SpecError, match="shipped subset cannot be read"):
        dataset.resolve_mnist(None, {contract.ENV_MNIST_URL: UNREACHABLE})


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
    with pytest.raises(dataset.DownloadFailed, match="sha256"):
        dataset.download(f"{url}/mnist.npz", dest, contract.MNIST_SHA256)
    assert list(dest.parent.iterdir()) == []


@pytest.fixture
def offline(keras_home, monkeypatch):
    monkeypatch.delenv(contract.ENV_DATA, raising=False)
    monkeypatch.setenv(contract.ENV_MNIST_URL, UNREACHABLE)


def test_offline_local_run_trains_on_the_subset_and_its_success_line_names_it(
    offline, monkeypatch, capsys, tmp_path
):
    given = {}

    def run_local(job, workdir, data, trainer_args, console, **options):
        given["data"] = data
        return {
            "dataset": contract.DATASET_MNIST_SUBSET,
            "test_accuracy": 0.97,
            "test_examples": 10000,
            "restarts": 0,
        }

    monkeypatch.setattr(runner, "run_local", run_local)
    assert run(["local", "--workdir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert given["data"] == contract.MNIST_SUBSET_PATH
    (notice,) = [i for i, line in enumerate(out) if "full MNIST is not available here" in line]
    assert out[notice + 1].startswith("  why: no --data") and "make mnist" in out[notice + 2]
    assert len(out[notice]) <= 160 and len(out[notice + 2]) <= 160  # was one line of 400
    assert (
        "succeeded on the MNIST subset shipped with tflaunch: test_accuracy=0.9700 "
        "(10000 test images)" in out[-1]
    )


def test_offline_local_run_with_a_corrupted_subset_fails_in_one_line(
    offline, corrupted_subset, capsys, tmp_path
):
    assert run(["local", "--workdir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "is corrupted" in err and "make mnist" in err
    assert not (tmp_path / "run").exists()
