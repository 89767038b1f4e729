"""Data: validation of Keras' mnist.npz format, step arithmetic, and the tf.data pipeline."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from trainer import data
from trainer.errors import ConfigError
from trainer.synthetic import make_mnist_like


def arrays(**changes: np.ndarray) -> dict[str, np.ndarray]:
    base = make_mnist_like(train=64, test=32)
    base.update(changes)
    return base


def test_a_valid_npz_loads_with_its_four_arrays(mnist_npz: Path) -> None:
    mnist = data.read_npz(str(mnist_npz))
    assert mnist.x_train.shape == (2048, 28, 28) and mnist.y_test.shape == (512,)


def test_a_missing_file_names_both_ways_to_provide_the_data(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        data.read_npz(str(tmp_path / "nope.npz"))
    message = str(error.value)
    for hint in (
        "nope.npz does not exist",
        "--data",
        "TFLAUNCH_DATA",
        data.MNIST_URL,
        data.IMAGE_DATA_PATH,
    ):
        assert hint in message


def test_a_file_that_is_not_an_npz_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "mnist.npz"
    path.write_text("not a zip")
    with pytest.raises(ConfigError, match=r"not a readable \.npz") as caught:
        data.read_npz(str(path))
    assert "not a zip archive" in str(caught.value)  # numpy's own guess was "pickled data"
    assert "pickle" not in str(caught.value)


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ({"x_train": np.zeros((64, 28), np.uint8)}, r"x_train has shape \(64, 28\)"),
        ({"x_test": np.zeros((32, 32, 32), np.uint8)}, r"x_test has shape \(32, 32, 32\)"),
        ({"y_train": np.zeros((63,), np.uint8)}, r"y_train has shape \(63,\)"),
        ({"y_test": np.full((32,), 10)}, "integer labels 0..9"),
        ({"y_test": np.zeros((32,), np.float32)}, "integer labels 0..9"),
    ],
)
def test_wrong_shapes_or_labels_name_the_array(broken: dict[str, np.ndarray], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        data.validate(arrays(**broken), "mnist.npz")


def test_missing_arrays_are_listed() -> None:
    incomplete = arrays()
    del incomplete["y_test"]
    with pytest.raises(ConfigError, match=r"lacks array\(s\) \['y_test'\]"):
        data.validate(incomplete, "mnist.npz")


def test_steps_per_epoch_is_one_pass_capped_by_the_request() -> None:
    assert data.steps_per_epoch(60000, 256, None) == 234
    assert data.steps_per_epoch(60000, 256, 10) == 10
    assert data.steps_per_epoch(60000, 256, 1000) == 234


def test_a_split_smaller_than_one_global_batch_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="fewer than one global batch of 256"):
        data.steps_in(100, 256, "test")


def test_images_are_scaled_to_unit_floats_with_a_channel() -> None:
    scaled = data.scale(np.array([[[0, 255]]], dtype=np.uint8))
    assert scaled.dtype == np.float32 and scaled.shape == (1, 1, 2, 1)
    assert scaled.max() == 1.0 and scaled.min() == 0.0


def test_train_pipeline_gives_global_batches_with_data_sharding() -> None:
    import tensorflow as tf

    mnist = data.Mnist(*arrays().values())
    dataset = data.train_dataset(mnist, global_batch=16, seed=1)
    images, labels = next(iter(dataset))
    assert images.shape == (16, 28, 28, 1) and labels.shape == (16,)
    policy = dataset.options().experimental_distribute.auto_shard_policy
    assert policy == tf.data.experimental.AutoShardPolicy.DATA


@pytest.mark.parametrize(("count", "steps"), [(30, 3), (32, 4), (7, 1)])
def test_the_eval_pipeline_holds_every_test_example_once_in_whole_padded_batches(
    count: int, steps: int
) -> None:
    mnist = data.Mnist(*arrays().values()).limited(None, count)
    assert data.eval_steps(count, global_batch=10) == steps
    batches = list(data.eval_dataset(mnist, global_batch=10))
    assert [images.shape[0] for images, _, _ in batches] == [10] * steps
    mask = np.concatenate([mask.numpy() for _, _, mask in batches])
    labels = np.concatenate([labels.numpy() for _, labels, _ in batches])
    assert mask.tolist() == [1.0] * count + [0.0] * (steps * 10 - count)
    assert labels[:count].tolist() == mnist.y_test.tolist()


def test_an_empty_test_set_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="test set has no examples"):
        data.eval_steps(0, 256)


def test_the_same_seed_gives_the_same_order_on_every_worker() -> None:
    mnist = data.Mnist(*arrays().values())
    first = [b[1].numpy().tolist() for b in data.train_dataset(mnist, 16, seed=7).take(8)]
    second = [b[1].numpy().tolist() for b in data.train_dataset(mnist, 16, seed=7).take(8)]
    assert first == second
    assert first[:4] != first[4:]  # and each epoch is reshuffled


def test_training_batches_hold_exactly_the_scaled_images() -> None:
    """The pipeline keeps uint8 and scales per batch: the same float32 values as `scale`."""
    mnist = data.Mnist(*arrays().values())
    images, labels = next(iter(data.train_dataset(mnist, global_batch=16, seed=1)))
    assert images.dtype.name == "float32"
    scaled = {label: [] for label in range(10)}
    for image, label in zip(data.scale(mnist.x_train), mnist.y_train, strict=True):
        scaled[int(label)].append(image)
    for image, label in zip(images.numpy(), labels.numpy(), strict=True):
        assert any(np.array_equal(image, candidate) for candidate in scaled[int(label)])


def test_a_damaged_npz_is_a_config_error_not_a_traceback(tmp_path: Path) -> None:
    """A flipped byte inside a compressed array fails in zlib, not in zipfile."""
    path = tmp_path / "mnist.npz"
    np.savez_compressed(path, **arrays())
    raw = bytearray(path.read_bytes())
    header = zipfile.ZipFile(path).infolist()[0].header_offset  # the first member's
    lengths = int.from_bytes(raw[header + 26 : header + 30], "little")  # name and extra field
    stream = header + 30 + (lengths & 0xFFFF) + (lengths >> 16)
    raw[stream] |= 0b110  # the first deflate block's type becomes 3, which does not exist
    path.write_bytes(bytes(raw))
    with pytest.raises(ConfigError, match=r"not a readable \.npz"):
        data.read_npz(str(path))


def test_an_empty_data_file_is_a_config_error_not_retried(tmp_path: Path) -> None:
    """np.load raises EOFError on an empty file: it was an exit 1, retried 3 times."""
    empty = tmp_path / "mnist.npz"
    empty.write_bytes(b"")
    with pytest.raises(ConfigError, match=r"not a readable \.npz"):
        data.read_npz(str(empty))


@pytest.mark.parametrize(
    "error",
    [
        OSError(28, "No space left on device"),
        OSError(122, "Disk quota exceeded"),
        RuntimeError("Failed to write checkpoint: No space left on device [Op:SaveV2]"),
    ],
)
def test_a_full_disk_is_recognised_in_python_and_tensorflow_errors(error: Exception) -> None:
    from trainer.main import disk_full

    assert disk_full(error)
    assert not disk_full(OSError(13, "Permission denied"))


@pytest.mark.parametrize(
    ("count", "global_batch", "expected"),
    [(10_000, 256, 1024), (10_000, 1000, 1000), (10_000, 4096, 4096), (449, 64, 512), (7, 10, 10)],
)
def test_the_eval_batch_is_a_whole_multiple_of_the_training_batch_near_the_target(
    count: int, global_batch: int, expected: int
) -> None:
    batch = data.eval_batch_size(count, global_batch)
    assert batch == expected and batch % global_batch == 0
