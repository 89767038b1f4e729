"""Real MNIST for `tflaunch local`: found or fetched once by the launcher, before any worker.

Left to the workers, every one of them would download into the same Keras cache file at the
same moment, and an offline machine would fail N times deep inside TensorFlow. Here the file
is looked up in the usual places (`--data`, `$TFLAUNCH_DATA`, Keras' cache), downloaded at
most once (checksum-verified, written atomically into Keras' own cache, where later runs and
plain Keras find it too), and a machine that can do neither trains on the real-digit subset
shipped in the package (checksum-verified as well), after one line saying so and how to get
the full set.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from launcher.core import contract
from launcher.core.errors import SpecError

DOWNLOAD_TIMEOUT_SECONDS = 60


class DownloadFailed(Exception):
    """The download did not produce the expected file; the message is the reason."""


@dataclasses.dataclass(frozen=True)
class DataChoice:
    """The file the workers get, and the one line to print when it is the fallback."""

    path: str
    notice: str | None = None


def keras_cache_path() -> Path:
    """Where Keras' mnist.load_data() keeps its copy (it honours $KERAS_HOME)."""
    home = os.environ.get("KERAS_HOME") or str(Path.home() / ".keras")
    return Path(home) / "datasets" / "mnist.npz"


def resolve_mnist(data: str | None, env: Mapping[str, str]) -> DataChoice:
    """--data, else $TFLAUNCH_DATA, else Keras' cache, else a fresh verified download, else
    the shipped subset.

    Raises:
        SpecError: the download failed and the shipped subset is missing or corrupted.
    """
    if data:
        return DataChoice(data)
    if env.get(contract.ENV_DATA):
        return DataChoice(env[contract.ENV_DATA])
    cached = keras_cache_path()
    if cached.is_file():
        return DataChoice(str(cached))
    url = env.get(contract.ENV_MNIST_URL) or contract.MNIST_URL
    try:
        download(url, cached, contract.MNIST_SHA256)
    except DownloadFailed as failure:
        why = (
            f"no --data, ${contract.ENV_DATA} unset, no {cached}, and downloading {url} "
            f"failed ({failure})"
        )
        return DataChoice(shipped_subset(why), notice=subset_notice(why))
    return DataChoice(str(cached))


def subset_notice(why: str) -> str:
    """Three short lines: what the run trains on instead, why, and how to get the full set
    (one line of 400 characters was read by nobody)."""
    return (
        f"tflaunch: full MNIST is not available here: training on "
        f"{contract.DATASET_NAMES[contract.DATASET_MNIST_SUBSET]} (real digits: 10,000 "
        f"training images, all 10,000 test images)\n"
        f"  why: {why}\n"
        f"  {contract.FULL_MNIST_HINT}"
    )


def shipped_subset(why: str) -> str:
    """The subset's path, once its sha256 is the one it was shipped with.

    Raises:
        SpecError: the file is missing or altered, naming both ways out.
    """
    path = contract.MNIST_SUBSET_PATH
    try:
        actual = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as error:
        raise SpecError(
            "--data",
            f"MNIST is not available: {why}, and the shipped subset cannot be read "
            f"({error.strerror}: {path}); reinstall tflaunch, or {contract.FULL_MNIST_HINT}",
        ) from None
    if actual != contract.MNIST_SUBSET_SHA256:
        raise SpecError(
            "--data",
            f"the shipped MNIST subset {path} is corrupted (sha256 {actual}, expected "
            f"{contract.MNIST_SUBSET_SHA256}), and {why}; reinstall tflaunch, or "
            f"{contract.FULL_MNIST_HINT}",
        )
    return path


def download(url: str, dest: Path, sha256: str) -> None:
    """Fetch `url` to `dest` atomically; nothing is left behind on failure.

    Raises:
        DownloadFailed: unreachable, cut short, or not the expected bytes.
    """
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
        raise DownloadFailed(getattr(error, "reason", None) or error) from None
