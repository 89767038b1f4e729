"""Real MNIST for `tflaunch local`: found or fetched once by the launcher, before any worker.

Left to the workers, every one of them would download into the same Keras cache file at the
same moment, and an offline machine would fail N times deep inside TensorFlow. Here the file
is looked up in the usual places, downloaded at most once (checksum-verified, written
atomically into Keras' own cache, where later runs and plain Keras find it too), and a
machine that can do neither gets one line saying how to provide it.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from launcher.core import contract
from launcher.core.errors import SpecError

DOWNLOAD_TIMEOUT_SECONDS = 60


def keras_cache_path() -> Path:
    """Where Keras' mnist.load_data() keeps its copy (it honours $KERAS_HOME)."""
    home = os.environ.get("KERAS_HOME") or str(Path.home() / ".keras")
    return Path(home) / "datasets" / "mnist.npz"


def resolve_mnist(data: str | None, env: Mapping[str, str]) -> str:
    """--data, else $TFLAUNCH_DATA, else Keras' cache, else a fresh verified download."""
    if data:
        return data
    if env.get(contract.ENV_DATA):
        return env[contract.ENV_DATA]
    cached = keras_cache_path()
    if cached.is_file():
        return str(cached)
    url = env.get(contract.ENV_MNIST_URL) or contract.MNIST_URL
    download(url, cached, contract.MNIST_SHA256)
    return str(cached)


def download(url: str, dest: Path, sha256: str) -> None:
    """Fetch `url` to `dest` atomically; nothing is left behind on failure."""
    partial = dest.with_name(dest.name + ".partial")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with (
            urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response,
            partial.open("wb") as out,
        ):
            for chunk in iter(lambda: response.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != sha256:
            raise OSError(f"sha256 {digest.hexdigest()} is not the expected {sha256}")
        os.replace(partial, dest)
    except (OSError, urllib.error.URLError, ValueError) as error:
        partial.unlink(missing_ok=True)
        reason = getattr(error, "reason", None) or error
        raise SpecError(
            "--data",
            f"MNIST is not available: no --data, ${contract.ENV_DATA} unset, no {dest}, and "
            f"downloading {url} failed ({reason}); download that file where you have internet "
            "and pass --data PATH (or set $TFLAUNCH_MNIST_URL to a mirror); for a smoke test "
            "without MNIST: make sample-data, then --data data/mnist-synthetic.npz",
        ) from None
