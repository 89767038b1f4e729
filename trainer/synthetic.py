"""A synthetic dataset in Keras' mnist.npz format, for machines without internet.

Real MNIST cannot be downloaded in CI or in an air-gapped cluster; tests and benchmarks
need data that a CNN can learn (loss must fall) without being trivial. Each class is a
fixed random stroke pattern, drawn with random intensity, shift and noise.

Usage: python -m trainer.synthetic OUT.npz [--train N] [--test N] [--seed S]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from launcher.core import contract

NUM_CLASSES = 10


def _prototypes(rng: np.random.Generator) -> np.ndarray:
    """One 28x28 pattern per class: a handful of random bright blobs."""
    prototypes = np.zeros((NUM_CLASSES, 28, 28), dtype=np.float32)
    for pattern in prototypes:
        for _ in range(6):
            row, col = rng.integers(4, 22, size=2)
            pattern[row - 2 : row + 3, col - 2 : col + 3] = 1.0
    return prototypes


def _images(prototypes: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Noisy, shifted, dimmed copies of each label's prototype, as uint8."""
    images = prototypes[labels] * rng.uniform(0.5, 1.0, size=(len(labels), 1, 1))
    shifts = rng.integers(-2, 3, size=(len(labels), 2))
    for i, (down, right) in enumerate(shifts):
        images[i] = np.roll(images[i], (down, right), axis=(0, 1))
    images += rng.normal(0.0, 0.35, size=images.shape)
    pixels: np.ndarray = (np.clip(images, 0.0, 1.0) * 255).astype(np.uint8)
    return pixels


def make_mnist_like(train: int, test: int, seed: int = 0) -> dict[str, np.ndarray]:
    """x_train (train, 28, 28) uint8, y_train (train,) uint8, and the same for test."""
    rng = np.random.default_rng(seed)
    prototypes = _prototypes(rng)
    y_train = rng.integers(0, NUM_CLASSES, size=train).astype(np.uint8)
    y_test = rng.integers(0, NUM_CLASSES, size=test).astype(np.uint8)
    return {
        "x_train": _images(prototypes, y_train, rng),
        "y_train": y_train,
        "x_test": _images(prototypes, y_test, rng),
        "y_test": y_test,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.synthetic", description=__doc__.splitlines()[0]
    )
    parser.add_argument("out", help="path of the .npz to write")
    parser.add_argument("--train", type=int, default=60000)
    parser.add_argument("--test", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    arrays = make_mnist_like(args.train, args.test, args.seed)
    np.savez_compressed(
        args.out,
        x_train=arrays["x_train"],
        y_train=arrays["y_train"],
        x_test=arrays["x_test"],
        y_test=arrays["y_test"],
        # contract.DATASET_MARKER: names the file, so result.json never calls it MNIST.
        tflaunch_dataset=np.array(contract.DATASET_SYNTHETIC),
    )


if __name__ == "__main__":
    main()
