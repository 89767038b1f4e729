"""A MultiWorkerMirroredStrategy created after other TensorFlow calls: TensorFlow's runtime has
started, the strategy can no longer configure its collective ops, and every worker fails at
startup (`RuntimeError: Collective ops must be configured at program startup`, TF 2.21).
tflaunch reads the order from the program's source and says so before any worker starts."""

from __future__ import annotations

import pytest

from launcher.api.spec import Script
from launcher.cli.main import run
from launcher.core import strategy_order

MWMS = "strategy = tf.distribute.MultiWorkerMirroredStrategy()"

TUTORIAL_ORDER = f"""\
import os
import numpy as np
import tensorflow as tf

images = np.zeros((8, 28, 28, 1), "float32")
train_dataset = tf.data.Dataset.from_tensor_slices(images).batch(4)
{MWMS}
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
"""


def _script(source: str, **files: str) -> Script:
    return Script(name="train.py", source=source, files=files)


def test_the_tutorials_order_is_named_with_the_first_call_and_the_strategys_line() -> None:
    """distribute/keras.ipynb builds its datasets first, then the strategy."""
    assert strategy_order.strategy_created_late(_script(TUTORIAL_ORDER)) == (
        "train.py:6 tf.data.Dataset.from_tensor_slices",
        "train.py:7",
    )


def test_a_strategy_created_first_is_not_named() -> None:
    source = f"import tensorflow as tf\n{MWMS}\nds = tf.data.Dataset.range(4)\n"
    assert strategy_order.strategy_created_late(_script(source)) is None


@pytest.mark.parametrize(
    "before",
    [
        "tf.config.list_physical_devices('GPU')",
        "tf.config.set_visible_devices([], 'GPU')",
        "tf.random.set_seed(1)",
        "tf.keras.utils.set_random_seed(1)",
        "tf.get_logger().setLevel('ERROR')",
        "layer = tf.keras.layers.Dense(3)",
        "(x, y), _ = tf.keras.datasets.mnist.load_data()",
        "resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()",
        "task = json.loads(os.environ['TF_CONFIG'])['task']",
        "make = lambda: tf.constant(1)",
        "spec = tf.TensorSpec([None, 3], tf.float32)",
        "y = tf.keras.utils.to_categorical([0, 1], 2)",
        "loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)",
        "save = tf.keras.callbacks.ModelCheckpoint('x.weights.h5', save_weights_only=True)",
        "tf.io.gfile.makedirs('/tmp/x')",
    ],
)
def test_calls_that_leave_the_runtime_unstarted_may_come_before_the_strategy(before) -> None:
    """Measured with TF 2.21 for the calls of TensorFlow itself: each, then
    MultiWorkerMirroredStrategy(), works (load_data reads a numpy file; a lambda runs later)."""
    source = f"import json, os\nimport tensorflow as tf\n{before}\n{MWMS}\n"
    assert strategy_order.strategy_created_late(_script(source)) is None


@pytest.mark.parametrize(
    ("imports", "call", "named"),
    [
        ("import tensorflow as tf", "tf.constant(1)", "tf.constant"),
        ("import tensorflow as tf", "tf.config.list_logical_devices()",
         "tf.config.list_logical_devices"),
        ("import tensorflow as tf", "tf.config.experimental.list_logical_devices()",
         "tf.config.experimental.list_logical_devices"),
        ("from tensorflow import keras", "keras.Sequential([])", "keras.Sequential"),
        ("from tensorflow.keras.models import Sequential", "Sequential([])", "Sequential"),
        ("import tensorflow_datasets as tfds", "tfds.load('mnist')", "tfds.load"),
        ("import keras", "keras.optimizers.Adam()", "keras.optimizers.Adam"),
    ],
)  # fmt: skip
def test_each_way_to_call_tensorflow_first_is_named(imports, call, named) -> None:
    source = f"import tensorflow as tf\n{imports}\nx = {call}\n{MWMS}\n"
    assert strategy_order.strategy_created_late(_script(source)) == (
        f"train.py:3 {named}",
        "train.py:4",
    )


def test_the_order_follows_the_functions_the_program_calls_and_only_those() -> None:
    source = (
        "import tensorflow as tf\n"
        "def unused():\n"
        "    return tf.constant(0)\n"
        "def datasets():\n"
        "    return tf.data.Dataset.range(4)\n"
        "def main():\n"
        "    ds = datasets()\n"
        f"    {MWMS}\n"
        "if __name__ == '__main__':\n"
        "    main()\n"
    )
    assert strategy_order.strategy_created_late(_script(source)) == (
        "train.py:5 tf.data.Dataset.range",
        "train.py:8",
    )


def test_a_dataset_built_in_a_module_of_the_program_is_named_in_that_module() -> None:
    setup = "import tensorflow as tf\ndef mnist_dataset():\n    return tf.data.Dataset.range(4)\n"
    source = (
        f"import tensorflow as tf\nimport mnist_setup\nds = mnist_setup.mnist_dataset()\n{MWMS}\n"
    )
    program = _script(source, **{"mnist_setup.py": setup})
    assert strategy_order.strategy_created_late(program) == (
        "mnist_setup.py:3 tf.data.Dataset.range",
        "train.py:4",
    )


def test_a_call_in_the_other_branch_of_an_if_is_not_on_the_strategys_way() -> None:
    source = (
        "import os\nimport tensorflow as tf\n"
        "if os.environ.get('ALONE'):\n"
        "    ds = tf.data.Dataset.range(4)\n"
        "else:\n"
        f"    {MWMS}\n"
    )
    assert strategy_order.strategy_created_late(_script(source)) is None
    either = (
        "import os\nimport tensorflow as tf\n"
        "if os.environ.get('DEBUG'):\n"
        "    ds = tf.data.Dataset.range(4)\n"
        f"{MWMS}\n"
    )
    assert strategy_order.strategy_created_late(_script(either)) == (
        "train.py:4 tf.data.Dataset.range",
        "train.py:5",
    )


def test_a_program_without_a_multi_worker_strategy_on_its_way_is_not_named() -> None:
    source = "import tensorflow as tf\nds = tf.data.Dataset.range(4)\nstrategy = make_strategy()\n"
    assert strategy_order.strategy_created_late(_script(source)) is None


def test_with_several_workers_the_late_strategy_is_exit_2_before_anything_starts(
    tmp_path, capsys
) -> None:
    path = tmp_path / "late.py"
    path.write_text(TUTORIAL_ORDER)
    for command in ("render", "validate"):
        code = run([command, "--script", str(path), "--workers", "2"])
        out, err = capsys.readouterr()
        assert (code, out) == (2, "")
        (line,) = err.strip().splitlines()
        assert line.startswith(
            "tflaunch: error: spec.script: late.py:6 tf.data.Dataset.from_tensor_slices runs "
            "TensorFlow before late.py:7 creates MultiWorkerMirroredStrategy"
        ), line
        assert "Collective ops must be configured at program startup" in line
        assert line.endswith(
            "create the strategy at program start, before any other TensorFlow call"
        )


def test_with_one_worker_the_late_strategy_is_a_warning(tmp_path, capsys) -> None:
    path = tmp_path / "late.py"
    path.write_text(TUTORIAL_ORDER)
    code = run(["submit", "--script", str(path), "--workers", "1", "--dry-run=client"])
    _, err = capsys.readouterr()
    assert code == 0
    (line,) = [line for line in err.splitlines() if "creates MultiWorkerMirroredStrategy" in line]
    assert line.startswith("tflaunch: warning: late.py:6 tf.data.Dataset.from_tensor_slices")
