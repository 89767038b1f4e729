"""TensorFlow's own `distribute/keras.ipynb`, extracted as a user would, under `tflaunch local`.

tests/data/tutorials/keras.ipynb is the notebook unchanged (tensorflow/docs, see README.md
beside it). A user turns it into a program by taking its code cells in order and leaving out
the IPython-only lines (`%load_ext`, `%tensorboard`, `!ls`), which plain Python cannot run.
Its `tfds.load('mnist')` downloads MNIST; this machine has no route to that host, so the data
set is prepared the way an air-gapped cluster would (scripts/tfds_mnist_offline.py: TFDS's own
mnist builder fed real MNIST digits from the subset shipped with tflaunch). The program itself
is not touched.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "tests" / "data" / "tutorials" / "keras.ipynb"
ACCURACY = re.compile(r"Eval loss: [0-9.]+, Eval [Aa]ccuracy: ([0-9.]+)")
TIMEOUT = 900


def extract(notebook: Path) -> str:
    """The notebook's code cells, in order, without the lines only IPython runs."""
    cells = json.loads(notebook.read_text())["cells"]
    lines = [
        line
        for cell in cells
        if cell["cell_type"] == "code"
        for line in [*"".join(cell["source"]).splitlines(), ""]
        if not line.lstrip().startswith(("%", "!"))
    ]
    return "\n".join(lines)


def _env(**extra: str) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "TFLAUNCH_"))}
    return {**kept, **extra}


@pytest.fixture(scope="module")
def tfds_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("tensorflow_datasets")
    prepared = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "tfds_mnist_offline.py"), str(data_dir)],
        capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
    )  # fmt: skip
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    assert (
        "mnist 3.0.1 prepared" in prepared.stdout and "train 10000, test 10000" in prepared.stdout
    )
    return data_dir


@pytest.mark.tf
@pytest.mark.timeout(2 * TIMEOUT)  # two full trainings, each bounded by TIMEOUT
def test_the_notebook_runs_under_tflaunch_local_as_under_plain_python(
    tmp_path: Path, tfds_data: Path
) -> None:
    program = extract(NOTEBOOK)
    assert "tfds.load(name='mnist'" in program and "%load_ext" not in program
    env = _env(TFDS_DATA_DIR=str(tfds_data))
    results = {}
    for how in ("python", "tflaunch"):
        here = tmp_path / how
        here.mkdir()
        (here / "keras_tutorial.py").write_text(program)
        command = (
            [sys.executable, "keras_tutorial.py"]
            if how == "python"
            else [sys.executable, "-m", "launcher", "local", "--script", "keras_tutorial.py",
                  "--workers", "1"]
        )  # fmt: skip
        run = subprocess.run(
            command, cwd=here, capture_output=True, text=True, timeout=TIMEOUT, env=env
        )
        assert run.returncode == 0, f"{how}: " + run.stdout[-3000:] + run.stderr[-3000:]
        results[how] = (run, here)
    plain, local = results["python"][0], results["tflaunch"][0]
    # The notebook evaluates three times: after fit, the saved model, the model reloaded in
    # the strategy's scope; each must have learnt the digits, as under plain Python.
    for run in (plain, local):
        accuracies = [float(a) for a in ACCURACY.findall(run.stdout)]
        assert len(accuracies) == 3 and min(accuracies) > 0.9, run.stdout[-2000:]
    # It is written for Keras 3 (a .weights.h5 checkpoint) and creates no
    # MultiWorkerMirroredStrategy, so tflaunch leaves it on Keras 3 and says why.
    said = local.stdout + local.stderr
    assert "the program runs on Keras 3 (TF_USE_LEGACY_KERAS=0)" in said
    assert "succeeded on all 1 worker(s): restarts=0" in said
    # Its ./training_checkpoints, ./logs and my_model.keras go to the worker's own directory,
    # as in a pod; the caller's directory keeps only the program.
    here = results["tflaunch"][1]
    assert sorted(p.name for p in here.iterdir()) == ["keras_tutorial.py", "tflaunch-runs"]
    worker = here / "tflaunch-runs" / "keras-tutorial" / "workers" / "worker-0"
    assert (worker / "my_model.keras").is_file()
    assert sorted(p.name for p in (worker / "training_checkpoints").iterdir())[-1] == (
        "ckpt_0012.weights.h5"
    )


def test_the_notebook_with_a_multiworker_strategy_is_refused_before_any_worker_starts(
    tmp_path: Path,
) -> None:
    """The notebook's MirroredStrategy swapped for MultiWorkerMirroredStrategy, as the
    warning for two workers advises: it loads its data set first, which fails at runtime
    ("Collective ops must be configured at program startup"); tflaunch says so up front."""
    program = extract(NOTEBOOK).replace(
        "tf.distribute.MirroredStrategy()", "tf.distribute.MultiWorkerMirroredStrategy()"
    )
    (tmp_path / "late.py").write_text(program)
    lines = program.splitlines()
    load = next(i for i, line in enumerate(lines, 1) if "tfds.load(" in line)
    create = next(i for i, line in enumerate(lines, 1) if "MultiWorkerMirroredStrategy()" in line)
    run = subprocess.run(
        [sys.executable, "-m", "launcher", "local", "--script", "late.py", "--workers", "2"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=_env(),
    )  # fmt: skip
    assert run.returncode == 2
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith(
        f"tflaunch: error: spec.script: late.py:{load} tfds.load runs TensorFlow before "
        f"late.py:{create} creates MultiWorkerMirroredStrategy"
    ), line
    assert line.endswith("create the strategy at program start, before any other TensorFlow call")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.py"]  # nothing started
