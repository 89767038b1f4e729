"""Which Keras a program runs on (TF_USE_LEGACY_KERAS): spec.keras, or, on auto, what the
program does. Keras 3's fit fails under MultiWorkerMirroredStrategy on several workers
(keras-team/keras#20585, measured in docs/own-training.md), so that case gets tf-keras; a
program written for Keras 3 otherwise gets Keras 3, as under plain `python`."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli.main import run
from launcher.core import keras_choice, render
from launcher.core.load import load_job

EXAMPLE = "examples/mnist.yaml"
ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "tests" / "data" / "keras3_tutorial.py"
MWMS = "import tensorflow as tf\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()\n"


def _job(tmp_path: Path, source: str | None, workers: int, **fields: object):
    overrides: list[tuple[str, object]] = [("spec.workers", workers)]
    if source is not None:
        path = tmp_path / "train.py"
        path.write_text(source)
        overrides.append(("spec.script", str(path)))
    overrides += [(f"spec.{key}", value) for key, value in fields.items()]
    return load_job(EXAMPLE, overrides)


def _legacy_env(job) -> str:
    (job_obj,) = [o for o in render.render(job) if o["kind"] == "Job"]
    (container,) = job_obj["spec"]["template"]["spec"]["containers"]
    return next(e["value"] for e in container["env"] if e["name"] == "TF_USE_LEGACY_KERAS")


def test_the_keras_3_tutorial_on_one_worker_runs_on_keras_3(tmp_path) -> None:
    """distribute/keras.ipynb's shape: MirroredStrategy, `.weights.h5` checkpoints."""
    job = load_job(EXAMPLE, [("spec.workers", 1), ("spec.script", str(TUTORIAL))])
    choice = keras_choice.choose(job.spec)
    assert choice.keras == "keras3"
    assert choice.why.startswith("it is written for Keras 3 (keras3_tutorial.py:")
    assert "a .weights.h5 file" in choice.why
    assert _legacy_env(job) == "0"


@pytest.mark.parametrize(
    "written_for_keras_3",
    ["import keras\n", "x = tf.keras.ops.mean\n", "from keras import layers\n"],
)
def test_a_multi_worker_strategy_on_several_workers_gets_tf_keras_whatever_the_program(
    tmp_path, written_for_keras_3
) -> None:
    job = _job(tmp_path, MWMS + written_for_keras_3, workers=2)
    choice = keras_choice.choose(job.spec)
    assert choice.keras == "tf-keras" and "keras-team/keras#20585" in choice.why
    assert choice.why.endswith("which tf-keras may not run"), choice.why  # said before it runs
    assert _legacy_env(job) == "1"


def test_on_one_worker_a_multi_worker_program_written_for_keras_3_gets_keras_3(tmp_path) -> None:
    """Keras 3's fit works under MWMS with one worker (measured, TF 2.21)."""
    job = _job(tmp_path, MWMS + "import keras\n", workers=1)
    assert keras_choice.choose(job.spec).keras == "keras3"


@pytest.mark.parametrize(
    ("source", "keras", "why"),
    [
        ("import tensorflow as tf\nm = tf.keras.Sequential()\n", "tf-keras", "nothing in it"),
        ("import tf_keras as keras\nfrom keras import ops\n", "tf-keras", "imports tf_keras"),
        ("import tensorflow as tf\ntf.keras.config.disable_traceback_filtering()\n", "keras3",
         "train.py:2 tf.keras.config"),
    ],
)  # fmt: skip
def test_without_a_multi_worker_strategy_the_program_says_which_keras(
    tmp_path, source, keras, why
) -> None:
    choice = keras_choice.choose(_job(tmp_path, source, workers=1).spec)
    assert (choice.keras, why in choice.why) == (keras, True), choice


def test_spec_keras_wins_over_what_the_program_shows(tmp_path) -> None:
    job = _job(tmp_path, MWMS + "import keras\n", workers=2, keras="keras3")
    assert keras_choice.choose(job.spec) == keras_choice.KerasChoice("keras3", "spec.keras says so")
    assert _legacy_env(job) == "0"
    job = _job(tmp_path, "import keras\n", workers=1, keras="tf-keras")
    assert _legacy_env(job) == "1"


def test_a_program_in_the_image_gets_tf_keras_unless_spec_keras_says_otherwise(tmp_path) -> None:
    job = _job(tmp_path, None, workers=2, command=["python", "/app/train.py"])
    choice = keras_choice.choose(job.spec)
    assert choice.keras == "tf-keras" and "spec.keras: keras3" in choice.why
    job = _job(tmp_path, None, workers=2, command=["python", "/app/train.py"], keras="keras3")
    assert _legacy_env(job) == "0"


def test_the_built_in_trainer_runs_on_tf_keras_and_refuses_keras3(capsys) -> None:
    assert _legacy_env(load_job(EXAMPLE)) == "1"
    code = run(["render", EXAMPLE, "--set", "spec.keras=keras3"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith("tflaunch: error: spec.keras: the built-in trainer is written for ")
    assert len(err.strip().splitlines()) == 1


def test_an_unknown_keras_is_refused_naming_the_choices(capsys) -> None:
    code = run(["render", EXAMPLE, "--set", "spec.keras=keras2"])
    _, err = capsys.readouterr()
    assert code == 2 and "spec.keras" in err and "tf-keras" in err and "keras3" in err, err


def test_submit_says_in_one_line_which_keras_the_program_runs_on_and_why(capsys) -> None:
    code = run(["submit", "--script", str(TUTORIAL), "--workers", "1", "--dry-run=client"])
    _, err = capsys.readouterr()
    assert code == 0
    (line,) = [line for line in err.splitlines() if "runs on" in line]
    assert line.startswith(
        "tflaunch: note: the program runs on Keras 3 (TF_USE_LEGACY_KERAS=0): it is written "
        "for Keras 3 (keras3_tutorial.py:"
    ), line


def test_standalone_keras_is_warned_about_only_where_its_fit_would_meet_several_workers(
    tmp_path,
) -> None:
    from launcher.core import script_lint

    program = _job(tmp_path, MWMS + "import keras\n", workers=1).spec.script
    assert not [w for w in script_lint.warnings(program, 1) if "imports keras" in w]
    (warning,) = [w for w in script_lint.warnings(program, 2) if "imports keras" in w]
    assert warning.startswith("train.py:3 imports keras, which is Keras 3: its fit fails under ")
    assert "on 2 workers (keras-team/keras#20585" in warning
    assert "import tf_keras as keras" in warning
