"""Which Keras a program's `tf.keras` is: tf-keras (TF_USE_LEGACY_KERAS=1) or Keras 3.

Since TensorFlow 2.16 `tf.keras` is Keras 3 unless TF_USE_LEGACY_KERAS=1 is set before
TensorFlow is imported. Keras 3's `fit` fails under MultiWorkerMirroredStrategy with several
workers (keras-team/keras#20585; measured with TF 2.21 and Keras 3.15 in docs/own-training.md),
and tf-keras works; but a program written for Keras 3 (TensorFlow's own tutorials today)
breaks under tf-keras (a `.weights.h5` checkpoint read back: `TypeError: unsupported operand
type(s) for /: 'Dataset' and 'int'`). So the choice is per program, from spec.keras, or
(auto) from what its source shows, and said in one line before the workers start.
"""

from __future__ import annotations

import dataclasses
from typing import Final, Literal

from launcher.api.spec import JobSpec
from launcher.core import contract, program, script_lint

TF_KERAS: Final = "tf-keras"
KERAS_3: Final = "keras3"
NAMES = {TF_KERAS: "tf-keras", KERAS_3: "Keras 3"}


@dataclasses.dataclass(frozen=True)
class KerasChoice:
    keras: Literal["tf-keras", "keras3"]
    why: str
    """Why, in a clause: `spec.keras says so`, `it imports keras (train.py:3)`."""

    @property
    def legacy(self) -> str:
        """The value of TF_USE_LEGACY_KERAS that gives this Keras."""
        return "1" if self.keras == TF_KERAS else "0"

    def sentence(self) -> str:
        return (
            f"the program runs on {NAMES[self.keras]} "
            f"({contract.ENV_LEGACY_KERAS}={self.legacy}): {self.why}"
        )


def choose(spec: JobSpec) -> KerasChoice:
    """spec.keras when set; else the built-in trainer's tf-keras, tf-keras for a multi-worker
    strategy on several workers, else what spec.script is written for (tf-keras unless it
    shows Keras 3: `import keras`, `keras.ops`, a `.weights.h5` file)."""
    if spec.keras == TF_KERAS or spec.keras == KERAS_3:
        return KerasChoice(spec.keras, "spec.keras says so")
    if not program.own_program(spec):
        return KerasChoice(TF_KERAS, "the built-in trainer is written for it")
    if spec.script is None:
        return KerasChoice(
            TF_KERAS,
            "spec.command's program is not read before it runs; set spec.keras: keras3 if it "
            "is written for Keras 3",
        )
    markers = script_lint.keras3_markers(spec.script)
    if spec.workers > 1 and script_lint.uses_multi_worker_strategy(spec.script):
        shows = (
            f"; yet it shows Keras 3 ({markers[0]}), which tf-keras may not run" if markers else ""
        )
        return KerasChoice(
            TF_KERAS,
            f"it uses MultiWorkerMirroredStrategy on {spec.workers} workers, where Keras 3's "
            f"fit fails (keras-team/keras#20585); spec.keras: keras3 for a custom loop{shows}",
        )
    own = script_lint.tf_keras_imports(spec.script)
    if own:
        return KerasChoice(TF_KERAS, f"it imports tf_keras ({own[0]})")
    if markers:
        more = f", and {len(markers) - 1} more" if len(markers) > 1 else ""
        return KerasChoice(KERAS_3, f"it is written for Keras 3 ({markers[0]}{more})")
    return KerasChoice(TF_KERAS, "nothing in it needs Keras 3; spec.keras: keras3 to change it")
