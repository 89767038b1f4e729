"""Prepare TensorFlow Datasets' `mnist` on a machine that cannot download it.

TensorFlow's tutorials (`distribute/keras.ipynb` and others) call `tfds.load('mnist')`, which
downloads MNIST from storage.googleapis.com the first time. On an air-gapped machine or
cluster that download fails. This writes the same prepared data set (TFDS's own `mnist`
builder, version 3.0.1, its own feature encoding and file names) into a TFDS data directory
from real MNIST digits that are here already:

* default: the subset shipped with tflaunch (launcher/core/data/mnist-subset.npz: the first
  10,000 training images and the whole test set, checked by sha256);
* `--npz FILE`: any mnist.npz in Keras' layout, e.g. the full set from `make mnist`.

The builder's download step is the only thing replaced: its `_split_generators` is given the
four idx files written from those arrays instead of downloaded ones, and everything after
(`_generate_examples`, encoding, sharding, dataset_info.json) is TFDS's own. The program then
runs unchanged with `TFDS_DATA_DIR=DIR` (or DIR = ~/tensorflow_datasets).

Usage: python scripts/tfds_mnist_offline.py DIR [--npz FILE]
Needs tensorflow and tensorflow-datasets.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SUBSET = ROOT / "launcher" / "core" / "data" / "mnist-subset.npz"
IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049  # the idx headers MNIST's own files carry


def write_idx(path: Path, array: np.ndarray, magic: int) -> None:
    """An array in MNIST's idx format: magic, dimensions (big-endian int32), bytes."""
    header = np.array([magic, *array.shape], dtype=">i4").tobytes()
    path.write_bytes(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def prepare(data_dir: Path, npz: Path) -> Any:
    import tensorflow_datasets as tfds

    if npz == SUBSET:
        from launcher.core import contract

        digest = hashlib.sha256(npz.read_bytes()).hexdigest()
        if digest != contract.MNIST_SUBSET_SHA256:
            sys.exit(f"{npz}: sha256 {digest} is not the shipped subset's")
    with np.load(npz) as arrays, tempfile.TemporaryDirectory() as tmp:
        files = {}
        for split, images, labels in (
            ("train", "x_train", "y_train"),
            ("test", "x_test", "y_test"),
        ):
            files[split] = (Path(tmp) / f"{split}-images", Path(tmp) / f"{split}-labels")
            write_idx(files[split][0], arrays[images], IMAGES_MAGIC)
            write_idx(files[split][1], arrays[labels], LABELS_MAGIC)
        counts = {split: len(arrays[f"y_{split}"]) for split in ("train", "test")}
        builder = tfds.builder("mnist", data_dir=str(data_dir))

        def local_splits(dl_manager: object) -> list[Any]:
            return [
                tfds.core.SplitGenerator(
                    name=split,
                    gen_kwargs={
                        "num_examples": counts[split],
                        "data_path": str(files[split][0]),
                        "label_path": str(files[split][1]),
                    },
                )
                for split in ("train", "test")
            ]

        builder._split_generators = local_splits  # the download, and nothing else
        builder.download_and_prepare()
    return builder.info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path, help="the TFDS data directory to write")
    parser.add_argument("--npz", type=Path, default=SUBSET, help="an mnist.npz (Keras' layout)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    info = prepare(args.data_dir, args.npz)
    splits = ", ".join(f"{name} {split.num_examples}" for name, split in info.splits.items())
    print(f"mnist {info.version} prepared in {args.data_dir} ({splits})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
