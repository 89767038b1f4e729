"""What of a worker's output reaches the `tflaunch local` console, and which line says why
it failed: the trainer's own lines, never TensorFlow's C++ log lines (issue 16)."""

from __future__ import annotations

import pytest

from launcher.local.console import ConsoleFilter, trainer_error

# What a CPU worker really prints (TF 2.21), in order, shortened.
CPP_BANNER = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
)
CPP_INFO = (
    "I0000 00:00:1796050256.322914    5639 cudart_stub.cc:31] Could not find cuda drivers "
    "on your machine, GPU will not be used."
)
CPP_INFO_TWO_LINES = (
    "I0000 00:00:1796050207.868469    4536 cpu_feature_guard.cc:227] This TensorFlow binary "
    "is optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild "
    "TensorFlow with the appropriate compiler flags.",
)
CPP_ERROR = (
    "E0000 00:00:1796050260.220975    5641 cuda_platform.cc:52] failed call to cuInit: "
    "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)"
)
CPP_WARNING = (
    "W0000 00:00:1796050262.169998    5641 dataset.cc:997] Input of GeneratorDatasetOp::Dataset "
    "will not be optimized because the dataset does not implement the AsGraphDefInternal()"
)
TRAINER_INFO = "14:51:05 [worker 1/2] INFO epoch 1/2: loss=2.1572 accuracy=0.2441 (3.0s)"
TRAINER_ERROR = (
    "14:51:09 [worker 1/2] ERROR training failed because a peer died, froze or restarted "
    "(UnavailableError: ...); exiting so that the group restarts from the last checkpoint"
)
TRACEBACK = ("Traceback (most recent call last):", '  File "x.py", line 1, in <module>')
RESULT = 'TFLAUNCH_RESULT {"test_accuracy": 0.9}'


def shown(lines: list[str], verbose: bool = False) -> list[str]:
    console = ConsoleFilter(verbose)
    return [line for line in lines if console.shows(line)]


def test_the_console_shows_the_trainers_lines_and_hides_tensorflows_cpp_lines() -> None:
    lines = [
        CPP_BANNER, CPP_INFO, *CPP_INFO_TWO_LINES, CPP_ERROR, TRAINER_INFO, CPP_WARNING,
        TRAINER_ERROR, *TRACEBACK, RESULT,
    ]  # fmt: skip
    assert shown(lines) == [TRAINER_INFO, TRAINER_ERROR, *TRACEBACK, RESULT]


def test_a_python_traceback_after_a_cpp_line_is_shown() -> None:
    assert shown([CPP_ERROR, *TRACEBACK]) == list(TRACEBACK)


def test_verbose_shows_every_line() -> None:
    lines = [CPP_BANNER, CPP_INFO, *CPP_INFO_TWO_LINES, CPP_ERROR, TRAINER_INFO, CPP_WARNING]
    assert shown(lines, verbose=True) == lines


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (TRAINER_ERROR, TRAINER_ERROR.split(" ERROR ", 1)[1]),
        ("14:43:47 [worker ?] ERROR bad trainer flag: unrecognized arguments: --epochz 3",
         "bad trainer flag: unrecognized arguments: --epochz 3"),
        (CPP_ERROR, None),  # "UNKNOWN ERROR (303)" is not the trainer's reason
        (TRAINER_INFO, None),
        ("14:51:09 [worker 0/2] WARNING no --checkpoint-dir", None),
    ],
)  # fmt: skip
def test_the_failure_reason_is_only_ever_the_trainers_own_error_line(
    line: str, reason: str | None
) -> None:
    assert trainer_error(line) == reason
