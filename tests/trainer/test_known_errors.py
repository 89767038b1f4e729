"""A program's failure whose cause is known is said with its remedy and not retried (exit 78),
through the real wrapper; the failures are the ones TensorFlow 2.21 gives (their last words
printed here by tiny programs, no TensorFlow)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.core import contract
from trainer import known_errors

REPO = Path(__file__).resolve().parents[2]
LATE = "RuntimeError: Collective ops must be configured at program startup"
H5 = "TypeError: unsupported operand type(s) for /: 'Dataset' and 'int'"
PER_REPLICA = "}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor."  # noqa: E501


def _wrapped(last_words: str, legacy: str) -> tuple[int, str]:
    """The wrapper's exit and ERROR message for a program whose last line is `last_words`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "TFLAUNCH_"))}
    env.pop(contract.ENV_WORKER_INDEX, None)
    env.update(PYTHONPATH=str(REPO), TF_USE_LEGACY_KERAS=legacy)
    program = f"import sys\nprint({last_words!r}, file=sys.stderr)\nsys.exit(1)\n"
    done = subprocess.run(
        [sys.executable, "-m", contract.WRAPPER_MODULE, "--", sys.executable, "-c", program],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    (error,) = [
        m.group("message")
        for m in map(contract.TRAINER_LOG_LINE.match, done.stderr.splitlines())
        if m and m.group("level") == "ERROR"
    ]
    return done.returncode, error


def test_a_strategy_created_late_ends_the_worker_as_a_config_error_with_the_remedy() -> None:
    code, error = _wrapped(LATE, "1")
    assert code == contract.EXIT_CONFIG_ERROR
    assert error.startswith(f"{LATE} (the program exited 1): MultiWorkerMirroredStrategy was")
    assert error.endswith("create the strategy at program start, before any other TensorFlow call")


def test_keras_3_weights_read_by_tf_keras_are_named_with_the_keras_to_run_on() -> None:
    code, error = _wrapped(H5, "1")
    assert code == contract.EXIT_CONFIG_ERROR
    assert "written for Keras 3 and ran on tf-keras" in error and "spec.keras: keras3" in error


def test_keras_3_fit_under_several_workers_is_named_with_tf_keras_as_the_remedy() -> None:
    code, error = _wrapped(PER_REPLICA, "0")
    assert code == contract.EXIT_CONFIG_ERROR
    assert "keras-team/keras#20585" in error and "spec.keras: tf-keras" in error


@pytest.mark.parametrize(("last_words", "legacy"), [(H5, "0"), (PER_REPLICA, "1")])
def test_a_keras_failure_is_explained_only_on_the_keras_that_gives_it(last_words, legacy) -> None:
    """The same words from the other Keras are some other mistake: an ordinary failure."""
    code, error = _wrapped(last_words, legacy)
    assert code == contract.EXIT_TRANSIENT
    assert error.endswith("(the program exited 1)")


def test_which_keras_a_program_runs_on_is_read_as_tensorflow_reads_it() -> None:
    assert known_errors.keras_of({"TF_USE_LEGACY_KERAS": "true"}) == "tf-keras"
    assert known_errors.keras_of({"TF_USE_LEGACY_KERAS": "0"}) == "keras3"
    assert known_errors.keras_of({}) == "keras3"
    assert known_errors.explain("ValueError: something else", {}) is None


def test_the_remedy_at_runtime_is_the_one_said_before_the_workers_start() -> None:
    from launcher.core import strategy_order

    assert known_errors.STRATEGY_FIRST == strategy_order.STRATEGY_FIRST
