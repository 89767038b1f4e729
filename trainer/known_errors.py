"""A program's failures whose cause is known: worded with the remedy, and not retried.

Some failures of a user's program come back on every run, whatever the group restarts: a
strategy created after TensorFlow started, code written for one Keras run on the other. The
wrapper (`trainer.run`) recognises them by the program's last words and exits
EXIT_CONFIG_ERROR (78), which the Job's podFailurePolicy, the operator and `tflaunch local`
never retry, with the sentence below as the worker's end. Each pattern was seen with
TensorFlow 2.21 (tf-keras 2.21, Keras 3.15).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from launcher.core import contract

TF_KERAS = "tf-keras"
KERAS_3 = "keras3"
LEGACY_VALUES = ("1", "true", "True")
"""What TensorFlow takes for TF_USE_LEGACY_KERAS on (`tf.keras` is then tf-keras)."""
STRATEGY_FIRST = "create the strategy at program start, before any other TensorFlow call"
"""The remedy `launcher.core.script_lint` says before the workers start, word for word."""


@dataclasses.dataclass(frozen=True)
class KnownFailure:
    pattern: re.Pattern[str]
    """Searched in the program's last words (its exception line, else its last line)."""
    words: str
    """What happened and what to change."""
    keras: str | None = None
    """Only when the program ran on this Keras (TF_KERAS or KERAS_3)."""


KNOWN = (
    KnownFailure(
        re.compile(r"Collective ops must be configured at program startup"),
        "MultiWorkerMirroredStrategy was created after TensorFlow had started (a tensor, a "
        f"dataset or a model came first); {STRATEGY_FIRST}",
    ),
    KnownFailure(
        re.compile(r"unsupported operand type\(s\) for /: 'Dataset' and 'int'"),
        "tf-keras read a weights file Keras 3 wrote (`.weights.h5`): the program is written "
        f"for Keras 3 and ran on tf-keras ({contract.ENV_LEGACY_KERAS}=1); run it on Keras 3 "
        "(spec.keras: keras3; under MultiWorkerMirroredStrategy with several workers Keras 3 "
        "trains with a custom loop, strategy.run, not with fit)",
        keras=TF_KERAS,
    ),
    KnownFailure(
        re.compile(r"\(PerReplica:|values\.PerReplica'>\) to a Tensor"),
        "Keras 3's fit does not run under MultiWorkerMirroredStrategy with several workers "
        "(keras-team/keras#20585); run the program on tf-keras (spec.keras: tf-keras, or "
        "auto), or train with a custom loop (strategy.run), which Keras 3 runs",
        keras=KERAS_3,
    ),
)


def keras_of(env: Mapping[str, str]) -> str:
    """Which Keras `tf.keras` is in a program run with `env`."""
    return TF_KERAS if env.get(contract.ENV_LEGACY_KERAS) in LEGACY_VALUES else KERAS_3


def explain(last_words: str, env: Mapping[str, str]) -> KnownFailure | None:
    """The known failure `last_words` shows, for a program run with `env`; None if none."""
    keras = keras_of(env)
    for known in KNOWN:
        if known.keras in (None, keras) and known.pattern.search(last_words):
            return known
    return None
