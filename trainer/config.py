"""The command line of `python -m trainer`, parsed into one frozen dataclass.

Every flag is checked here, by argparse, so that a bad value costs one line before
anything heavy (TensorFlow, data, peers) is touched. A bad flag is a configuration error
(exit 78), not argparse's usual exit 2: the flags come from the job spec
(spec.trainer.extraArgs), so a restarted worker would fail the same way, and the Job's
podFailurePolicy fails the Job at once only on 78. Checks that need more than
one flag or the cluster (batch divisibility, data shapes) live in `preflight` and `data`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

from launcher.core import contract
from trainer import precision
from trainer.errors import ConfigError

SAVE_FREQ_EPOCH = "epoch"
THREADS_AUTO = "auto"
DEFAULT_STEPS_PER_EXECUTION = 32
"""Measured on 2 co-located CPU workers (docs/performance-trainer.md)."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything a worker needs to know, identical on every worker of a group."""

    data: str | None
    """Path of an mnist.npz; None means Keras' cached download."""
    epochs: int
    global_batch_size: int
    """Summed over all replicas; each replica gets global / num_replicas_in_sync."""
    steps_per_epoch: int | None
    """Upper bound on steps per epoch; None means one pass over the training set."""
    save_freq: str | int
    """"epoch" or a number of steps between backups."""
    checkpoint_dir: str | None
    """Shared by all workers so a restarted group resumes; None means a fresh temp dir."""
    model_dir: str
    tensorboard_dir: str | None
    """Where the chief writes TensorBoard event files; None: none are written."""
    expect_gpus: int | None
    """Fail unless this many GPUs are visible; 0 = CPU only (no CUDA); None = no check."""
    rendezvous_timeout: float
    collective_timeout: float
    """Seconds one collective may take (CommunicationOptions); 0 = no limit."""
    stall_timeout: float
    """Seconds without a finished step before the watchdog exits; 0 disables it."""
    learning_rate: float
    seed: int
    max_train_examples: int | None
    max_test_examples: int | None
    threads: int | str
    """Intra/inter-op threads: "auto", 0 for TensorFlow's default, or a count."""
    steps_per_execution: int
    precision: str = "auto"
    """Keras dtype policy: "auto", "float32" or "mixed" (trainer.precision decides)."""
    jit_compile: bool = False
    """Compile the train step with XLA (measured 0.2-0.4x on CPU: off by default)."""
    heartbeat_timeout: float = 0.0
    """Coordination-service heartbeat timeout in seconds; 0 = TensorFlow's (10 s)."""


class UsageError(ConfigError):
    """A flag argparse refused (unknown, missing value, bad value): retrying cannot help."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError with one line instead of printing usage and exit 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(
            f"bad trainer flag: {message}; fix spec.trainer (or spec.trainer.extraArgs, or "
            f"the flags after `tflaunch local --`); see `{self.prog} --help`"
        )


def _number(
    kind: Callable[[str], int | float], minimum: float, what: str
) -> Callable[[str], int | float]:
    """An argparse type: `kind` parsed and at least `minimum`, else a one-line error."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    return parse


def _save_freq(text: str) -> str | int:
    """ "epoch" or a positive number of steps."""
    if text == SAVE_FREQ_EPOCH:
        return text
    try:
        steps = int(text)
    except ValueError:
        steps = 0
    if steps < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither 'epoch' nor a positive number of steps"
        )
    return steps


def _threads(text: str) -> int | str:
    """ "auto", 0 (TensorFlow's default) or a positive thread count."""
    if text == THREADS_AUTO:
        return text
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is neither 'auto' nor a count >= 0")
    return count


_POSITIVE_INT = _number(int, 1, "a positive integer")
_NON_NEGATIVE_INT = _number(int, 0, "an integer >= 0")
_POSITIVE_SECONDS = _number(float, 0.001, "a positive number of seconds")
_NON_NEGATIVE_SECONDS = _number(float, 0, "a number of seconds >= 0")


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    """The argparse parser; `env` supplies defaults that come from the environment."""
    parser = _Parser(
        prog="python -m trainer",
        allow_abbrev=False,  # `--epoch 50` must not become --epochs behind the spec's back
        description=(
            "Train the MNIST CNN under MultiWorkerMirroredStrategy; one process per "
            "worker, the cluster comes from TF_CONFIG (absent = single worker).\n"
            "Example: python -m trainer --data mnist.npz --epochs 3 --model-dir out/"
        ),
        epilog=(
            f"Exit codes: {contract.EXIT_OK} done, {contract.EXIT_TRANSIENT} transient "
            f"(retry may help), {contract.EXIT_RENDEZVOUS_TIMEOUT} peers never came, "
            f"{contract.EXIT_CONFIG_ERROR} configuration error, a bad flag included "
            "(retry cannot help)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = parser.add_argument_group("data")
    data.add_argument(
        "--data",
        metavar="PATH",
        default=env.get(contract.ENV_DATA) or None,
        help=f"mnist.npz in Keras' format (default: ${contract.ENV_DATA}, else Keras' "
        "cached download in ~/.keras/datasets)",
    )
    data.add_argument(
        "--max-train-examples",
        type=_POSITIVE_INT,
        metavar="N",
        help="use only the first N training examples (quick runs)",
    )
    data.add_argument(
        "--max-test-examples",
        type=_POSITIVE_INT,
        metavar="N",
        help="use only the first N test examples (quick runs)",
    )

    training = parser.add_argument_group("training")
    training.add_argument("--epochs", type=_POSITIVE_INT, default=3, help="(default: 3)")
    training.add_argument(
        "--global-batch-size",
        type=_POSITIVE_INT,
        default=256,
        metavar="N",
        help="batch summed over all replicas; must be divisible by their number (default: 256)",
    )
    training.add_argument(
        "--steps-per-epoch",
        type=_POSITIVE_INT,
        metavar="N",
        help="cap on steps per epoch (default: one pass, train examples // global batch)",
    )
    training.add_argument(
        "--learning-rate",
        type=_number(float, 1e-12, "a positive number"),
        default=1e-3,
        help="Adam's (default: 0.001)",
    )
    training.add_argument(
        "--seed",
        type=int,
        default=42,
        help="shuffle and initialization seed, same on every worker (default: 42)",
    )
    training.add_argument(
        "--steps-per-execution",
        type=_POSITIVE_INT,
        default=DEFAULT_STEPS_PER_EXECUTION,
        metavar="N",
        help="train steps per tf.function call: fewer Python round trips per step; "
        f"callbacks and the watchdog see every N-th step (default: {DEFAULT_STEPS_PER_EXECUTION})",
    )

    speed = parser.add_argument_group("speed (measured in docs/performance.md)")
    speed.add_argument(
        "--precision",
        choices=precision.CHOICES,
        default=precision.AUTO,
        help="mixed = 16-bit compute with float32 weights (bfloat16 on CPU, float16 on GPU); "
        "auto = decided from the device, the reason logged: bfloat16 on a CPU with AMX, "
        "float16 on GPUs of compute capability >= 7.0, else float32 (default: auto)",
    )
    speed.add_argument(
        "--jit-compile",
        action="store_true",
        help="compile the train step with XLA (on CPU it measured 0.2-0.4x the images/s "
        "of the default; for GPUs, measure first)",
    )

    output = parser.add_argument_group("checkpoints and output")
    output.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="BackupAndRestore directory, shared by all workers; a restarted group "
        "resumes from it (default: a fresh temporary directory, so no resume)",
    )
    output.add_argument(
        "--save-freq",
        type=_save_freq,
        default=SAVE_FREQ_EPOCH,
        metavar="epoch|N",
        help="back up at every epoch end or every N steps (default: epoch)",
    )
    output.add_argument(
        "--model-dir",
        default="./model",
        metavar="DIR",
        help=f"where the chief writes the SavedModel and {contract.RESULT_FILE} (default: ./model)",
    )

    output.add_argument(
        "--tensorboard-dir",
        metavar="DIR",
        help="where the chief writes TensorBoard event files: train/ (loss, accuracy, "
        "learning rate, images/s per step window and per epoch) and test/ (per epoch, final "
        "evaluation) (default: none written)",
    )

    cluster = parser.add_argument_group("cluster and devices")
    cluster.add_argument(
        "--expect-gpus",
        type=_NON_NEGATIVE_INT,
        metavar="N",
        help="fail unless N GPUs are visible; 0 = CPU only: TensorFlow does not even "
        "initialize CUDA (the launcher passes gpusPerWorker) (default: use the GPUs "
        "TensorFlow sees, no check)",
    )
    cluster.add_argument(
        "--rendezvous-timeout",
        type=_POSITIVE_SECONDS,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait for every peer to be reachable (default: 300)",
    )
    cluster.add_argument(
        "--collective-timeout",
        type=_NON_NEGATIVE_SECONDS,
        default=0.0,
        metavar="SECONDS",
        help="per-collective timeout (CommunicationOptions.timeout_seconds; TensorFlow "
        "starts a thread per collective for it); 0 = none: dead peers are caught by "
        "heartbeats within seconds and stuck ones by --stall-timeout (default: 0)",
    )
    cluster.add_argument(
        "--heartbeat-timeout",
        type=_NON_NEGATIVE_SECONDS,
        default=0.0,
        metavar="SECONDS",
        help="a peer silent this long is dead: the group stops and restarts (coordination "
        "service); shorter notices a dead peer sooner but takes a CPU-starved one for dead "
        "too; 0 = TensorFlow's default, 10 s (default: 0)",
    )
    cluster.add_argument(
        "--stall-timeout",
        type=_NON_NEGATIVE_SECONDS,
        default=300.0,
        metavar="SECONDS",
        help="exit 1 when no training/eval step finishes for this long, e.g. a peer is "
        "alive but stuck; 0 disables (default: 300)",
    )
    cluster.add_argument(
        "--threads",
        type=_threads,
        default=THREADS_AUTO,
        metavar="auto|N",
        help="TensorFlow intra/inter-op threads per worker; auto = the CPUs this process "
        "may use (affinity mask, capped by the cgroup CPU limit, which TensorFlow itself "
        "ignores), shared out among the workers with this host in TF_CONFIG (local "
        "workers); 0 = TensorFlow's default (default: auto)",
    )
    return parser


def parse_args(argv: Sequence[str] | None, env: Mapping[str, str] | None = None) -> TrainConfig:
    """Parse the command line.

    Raises:
        UsageError: a flag is unknown, lacks its value or has a bad one (one line).
    """
    namespace = build_parser(os.environ if env is None else env).parse_args(argv)
    return TrainConfig(**vars(namespace))
