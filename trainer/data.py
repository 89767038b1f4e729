"""MNIST in, tf.data pipelines out, identical step counts on every worker.

Loading and validation use only numpy so that a missing or malformed file is reported in
a second, before TensorFlow is even imported. TensorFlow is imported inside the
functions that build pipelines, for the same reason.

Why the pipeline looks the way it does:
* Every worker holds the whole (in-memory) dataset, so FILE sharding is impossible; the
  DATA auto-shard policy is set explicitly and each worker keeps its slice of every
  global batch.
* Shuffling uses the same seed on every worker: DATA sharding relies on all workers
  seeing the same sequence of global batches.
* The pipeline repeats and `fit` gets an explicit `steps_per_epoch`, the same number on
  every worker: a worker that runs out of data one step early leaves the others hanging
  in a collective.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import zipfile
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

from launcher.core import contract
from trainer import mnist_pypi
from trainer.errors import ConfigError

if TYPE_CHECKING:
    import tensorflow as tf

log = logging.getLogger(__name__)

MNIST_URL = contract.MNIST_URL
IMAGE_DATA_PATH = "/opt/tflaunch/mnist.npz"
"""Where the trainer image bakes the dataset in (the launcher sets TFLAUNCH_DATA to it)."""
KERAS_CACHE = os.path.join("~", ".keras", "datasets", "mnist.npz")
ARRAYS = ("x_train", "y_train", "x_test", "y_test")
IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10


@dataclasses.dataclass(frozen=True)
class Mnist:
    """The four arrays of Keras' mnist.npz, checked: images (N, 28, 28), labels (N,)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    dataset: str = contract.DATASET_FILE
    """What the arrays are (contract.DATASET_*): result.json's "dataset"."""

    def limited(self, max_train: int | None, max_test: int | None) -> Mnist:
        """The first `max_train` / `max_test` examples, for quick runs."""
        return Mnist(
            self.x_train[:max_train],
            self.y_train[:max_train],
            self.x_test[:max_test],
            self.y_test[:max_test],
            self.dataset,
        )


def missing_data_message(reason: str) -> str:
    """One paragraph naming both ways to provide the data."""
    return (
        f"MNIST data is not available: {reason}. Provide it either by passing --data "
        f"(or setting $TFLAUNCH_DATA) to an mnist.npz in Keras' format, e.g. downloaded "
        f"once from {MNIST_URL}, or by running the trainer image, which bakes it in at "
        f"{IMAGE_DATA_PATH}. Without either, the trainer tries Keras' download into "
        f"{KERAS_CACHE}, which needs internet access, and then the MNIST subset shipped "
        f"in the package ({contract.MNIST_SUBSET_PATH})."
    )


def file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def is_shipped_subset(path: str) -> bool:
    """True for the subset's own file, once its sha256 is the one it was shipped with.

    Raises:
        ConfigError: that file was altered.
    """
    if os.path.realpath(path) != os.path.realpath(contract.MNIST_SUBSET_PATH):
        return False
    actual = file_sha256(path)
    if actual != contract.MNIST_SUBSET_SHA256:
        raise ConfigError(
            f"the shipped MNIST subset {path} is corrupted (sha256 {actual}, expected "
            f"{contract.MNIST_SUBSET_SHA256}); reinstall tflaunch, or {contract.FULL_MNIST_HINT}"
        )
    return True


def identify(path: str, arrays: dict[str, np.ndarray]) -> str:
    """Which data set a file other than the shipped subset's own holds (contract.DATASET_*),
    from its digests and marker.

    Full MNIST is recognised by its content, so Keras' copy and one written by
    `trainer.mnist_pypi` are both named so; so is a copy of the subset.
    """
    marker = arrays.get(contract.DATASET_MARKER)
    if marker is not None and marker.shape == () and str(marker) == contract.DATASET_SYNTHETIC:
        return contract.DATASET_SYNTHETIC
    digest = mnist_pypi.arrays_sha256(arrays)
    if digest == mnist_pypi.FULL_ARRAYS_SHA256 or file_sha256(path) == contract.MNIST_SHA256:
        return contract.DATASET_MNIST
    if digest == mnist_pypi.SUBSET_ARRAYS_SHA256:
        return contract.DATASET_MNIST_SUBSET
    return contract.DATASET_FILE


def validate(
    arrays: dict[str, np.ndarray], source: str, dataset: str = contract.DATASET_FILE
) -> Mnist:
    """Check names, shapes and label range of the four arrays.

    Raises:
        ConfigError: naming the array and what is wrong with it.
    """
    missing = [name for name in ARRAYS if name not in arrays]
    if missing:
        raise ConfigError(
            f"{source} lacks array(s) {missing}; an mnist.npz in Keras' format has "
            f"{list(ARRAYS)} (it has {sorted(arrays)})"
        )
    for split in ("train", "test"):
        images, labels = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if images.ndim != 3 or images.shape[1:] != IMAGE_SHAPE:
            raise ConfigError(f"{source}: x_{split} has shape {images.shape}, expected (N, 28, 28)")
        if labels.shape != (images.shape[0],):
            raise ConfigError(
                f"{source}: y_{split} has shape {labels.shape}, expected "
                f"({images.shape[0]},) to match x_{split}"
            )
        if not np.issubdtype(labels.dtype, np.integer) or (
            labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES)
        ):
            raise ConfigError(
                f"{source}: y_{split} must hold integer labels 0..9 (dtype {labels.dtype})"
            )
    return Mnist(arrays["x_train"], arrays["y_train"], arrays["x_test"], arrays["y_test"], dataset)


def read_npz(path: str) -> Mnist:
    """Load and validate an mnist.npz.

    Raises:
        ConfigError: the file is missing, not an npz, or has the wrong arrays.
    """
    if not os.path.isfile(path):
        raise ConfigError(missing_data_message(f"{path} does not exist"))
    shipped = is_shipped_subset(path)  # checked before a single byte of it is decompressed
    try:
        with open(path, "rb") as file:
            is_zip = zipfile.is_zipfile(file)
    except OSError as e:
        raise ConfigError(f"{path} is not a readable .npz file ({e.strerror or e})") from None
    if not is_zip:  # else numpy guesses a pickle and talks about that
        raise ConfigError(
            f"{path} is not a readable .npz file (not a zip archive, which every .npz is); "
            "pass an mnist.npz as Keras saves it"
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:  # EOF: empty
        raise ConfigError(f"{path} is not a readable .npz file ({e or type(e).__name__})") from None
    mnist = validate(arrays, path)
    dataset = contract.DATASET_MNIST_SUBSET if shipped else identify(path, arrays)
    return dataclasses.replace(mnist, dataset=dataset)


def download_with_keras() -> Mnist:
    """Keras' own loader: its cache, else a download (needs internet).

    Raises:
        ConfigError: neither the cache nor the download worked.
    """
    # TensorFlow's own import (in `main.import_tensorflow_meanwhile`'s thread) imports
    # tf_keras; importing tf_keras first from this thread would deadlock with it, and Python
    # breaks that by handing one side a half-initialized module ("No module named
    # 'tensorflow.compat'"). Importing tensorflow first waits for that thread's import.
    import tensorflow  # noqa: F401
    import tf_keras

    log.info("no --data / $TFLAUNCH_DATA: trying Keras' cache %s or download", KERAS_CACHE)
    try:
        (x_train, y_train), (x_test, y_test) = tf_keras.datasets.mnist.load_data()
    except Exception as e:  # tf_keras raises a bare Exception on URL failures
        raise ConfigError(missing_data_message(f"Keras' download failed ({e})")) from None
    arrays = {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
    return validate(arrays, "Keras' mnist.npz", contract.DATASET_MNIST)


def load_mnist(path: str | None) -> Mnist:
    """The dataset from `path` if given, else from Keras' cache or download, else the
    subset shipped in the package (after one warning saying so)."""
    source = path or KERAS_CACHE
    if path:
        mnist = read_npz(path)
    else:
        try:
            mnist = download_with_keras()
        except ConfigError as e:
            source = contract.MNIST_SUBSET_PATH
            mnist = read_npz(source)
            log.debug("Keras' loader: %s", e)
            log.warning(
                "full MNIST is not available (no --data, $%s unset, and Keras' loader found "
                "no %s and could not download it): training on %s (real digits: %d "
                "training images, %d test images); %s",
                contract.ENV_DATA,
                KERAS_CACHE,
                contract.DATASET_NAMES[contract.DATASET_MNIST_SUBSET],
                len(mnist.y_train),
                len(mnist.y_test),
                contract.FULL_MNIST_HINT,
            )
    log.info(
        "%s from %s: %d train / %d test images",
        contract.DATASET_NAMES[mnist.dataset],
        source,
        len(mnist.y_train),
        len(mnist.y_test),
    )
    return mnist


def steps_in(num_examples: int, global_batch: int, split: str) -> int:
    """Full global batches in a split (training drops the remainder of each pass).

    Raises:
        ConfigError: the split holds less than one global batch.
    """
    steps = num_examples // global_batch
    if steps == 0:
        raise ConfigError(
            f"the {split} set has {num_examples} example(s), fewer than one global batch "
            f"of {global_batch}; lower --global-batch-size or raise --max-{split}-examples"
        )
    return steps


EVAL_BATCH_TARGET = 1024
"""Test examples per evaluation step (at least one training batch): forward passes only, so a
batch this size costs no memory worth counting, and each step is one all-reduce and one
host-side input fetch fewer; the sums are the same over the same examples."""


def eval_batch_size(num_examples: int, global_batch: int) -> int:
    """The evaluation's global batch: a whole multiple of the training one (so it splits
    evenly over the replicas as that does), about `EVAL_BATCH_TARGET`, and never more batches
    of padding than the training batch would need (a small test set stays one step)."""
    multiple = max(1, EVAL_BATCH_TARGET // global_batch)
    return global_batch * min(multiple, max(1, eval_steps(num_examples, global_batch)))


def eval_steps(num_examples: int, global_batch: int) -> int:
    """Global batches that hold every test example, the last one padded (`eval_dataset`).

    Raises:
        ConfigError: the test set is empty.
    """
    if num_examples == 0:
        raise ConfigError(
            "the test set has no examples; x_test/y_test of the --data file are empty"
        )
    return -(-num_examples // global_batch)


def steps_per_epoch(num_examples: int, global_batch: int, requested: int | None) -> int:
    """Steps per epoch, the same on every worker: min(requested, one pass)."""
    available = steps_in(num_examples, global_batch, "train")
    return min(requested, available) if requested else available


def scale(images: np.ndarray) -> np.ndarray:
    """uint8 (N, 28, 28) -> float32 (N, 28, 28, 1) in [0, 1]."""
    return (images.astype(np.float32) / 255.0)[..., np.newaxis]


def _distribute_options(autotune: bool) -> tf.data.Options:
    """DATA sharding: in-memory data has no files to shard by.

    Without `autotune`, no tf.data autotuning thread runs for these datasets: one fewer
    for an iterator's teardown to wait out (why it can wait seconds: `train.KeepTrainingIterator`).
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.autotune.enabled = autotune
    return options


def train_dataset(
    mnist: Mnist, global_batch: int, seed: int, autotune: bool = True
) -> tf.data.Dataset:
    """Shuffled (same seed everywhere), batched globally, repeated, prefetched."""
    import tensorflow as tf

    return (
        # uint8 in, float32 out per batch: the tensor tf.data copies the training set into,
        # and the full-size shuffle buffer, are 4x smaller than with float32 images, and
        # one vectorized cast per batch replaces 256 per-image ones (docs/performance.md).
        tf.data.Dataset.from_tensor_slices((mnist.x_train[..., np.newaxis], _labels(mnist.y_train)))
        # `cache` keeps tf.data from re-materializing the examples. It comes BEFORE shuffle:
        # caching after it would freeze the first epoch's order for every later epoch.
        .cache()
        .shuffle(len(mnist.y_train), seed=seed, reshuffle_each_iteration=True)
        .batch(global_batch, drop_remainder=True)
        .map(tf.autograph.experimental.do_not_convert(_to_float))  # straight-line
        .repeat()
        .prefetch(tf.data.AUTOTUNE if autotune else 2)
        .with_options(_distribute_options(autotune))
    )


def padded_test_set(mnist: Mnist, global_batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Images, labels and a mask (1 = real, 0 = padding), padded to whole global batches."""
    count = len(mnist.y_test)
    padding = eval_steps(count, global_batch) * global_batch - count
    images = np.concatenate([scale(mnist.x_test), np.zeros((padding, *IMAGE_SHAPE, 1), np.float32)])
    labels = np.concatenate([_labels(mnist.y_test), np.zeros(padding, np.int64)])
    mask = np.concatenate([np.ones(count, np.float32), np.zeros(padding, np.float32)])
    return images, labels, mask


def eval_dataset(mnist: Mnist, global_batch: int, autotune: bool = True) -> tf.data.Dataset:
    """(images, labels, mask) in whole global batches: every test example once, and the
    last batch padded with mask 0, so every worker evaluates the same shapes and steps."""
    import tensorflow as tf

    return (
        tf.data.Dataset.from_tensor_slices(padded_test_set(mnist, global_batch))
        .batch(global_batch, drop_remainder=True)
        .cache()
        .prefetch(tf.data.AUTOTUNE if autotune else 2)
        .with_options(_distribute_options(autotune))
    )


def _to_float(images: Any, labels: Any) -> tuple[Any, Any]:
    """A batch of uint8 images to float32 in [0, 1], exactly as `scale` does it."""
    import tensorflow as tf

    return tf.cast(images, tf.float32) / 255.0, labels


def _labels(labels: np.ndarray) -> Any:
    return labels.astype(np.int64)
