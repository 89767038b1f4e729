"""Which lines of a worker's output reach the `tflaunch local` console, and which one says
why the worker failed.

A TensorFlow worker prints two kinds of lines: the trainer's own
(`contract.TRAINER_LOG_FORMAT`, plus the result line and Python tracebacks) and TensorFlow's
C++ runtime log (`E0000 00:00:1796050260.220975 5641 cuda_platform.cc:52] ...`). Some of
the latter are printed before TensorFlow applies TF_CPP_MIN_LOG_LEVEL (absl's "All log
messages before absl::InitializeLog()" banner, oneDNN, the CUDA stub), so no environment
variable hides them; on a CPU machine they read like failures ("failed call to cuInit:
UNKNOWN ERROR (303)") when nothing is wrong. So the console shows the trainer's lines, and
the per-worker log files keep everything; `--verbose` shows everything on the console too.
"""

from __future__ import annotations

import re

from launcher.core import contract
from launcher.core.progress import PROGRESS_LINE_PREFIX

CPP_CONTINUATION = re.compile(
    r"^(Additional GRPC error information|:[A-Z_]+:|:\{|/job:|The tasks have crashed|"
    r"The following tasks|To enable the following instructions|The error could be from a "
    r"previous operation|\s*\[\[\{\{node )"
)
"""The continuation lines of TensorFlow's multi-line C++ messages that an own program's
console must not show (its own lines carry no prefix, so only known shapes are hidden):
`Additional GRPC error information from remote target ...`, `:UNKNOWN:Error received from
peer {...}`, `The tasks have crashed. Check the task logs ...`."""
KERAS_PROGRESS_BAR = re.compile(r"^(\s*\d+/(\d+|Unknown) \[[=>.]*\] - |Epoch \d+/\d+$)")
"""A tf-keras progress bar's lines (`Epoch 2/3`, then `70/70 [=====] - 5s 60ms/step - loss:
0.31` as `contract.final_frame` leaves it): every worker prints them, every epoch."""
RECORD_STARTS = (
    "Traceback ", "Exception in thread ", contract.RESULT_LINE_PREFIX, PROGRESS_LINE_PREFIX
)  # fmt: skip
"""Lines that are not the continuation of a multi-line C++ message, besides trainer lines."""


def starts_own_record(line: str) -> bool:
    """True for a line that begins something of the trainer's (or Python's) own."""
    return bool(contract.TRAINER_LOG_LINE.match(line)) or line.startswith(RECORD_STARTS)


def trainer_error(line: str) -> str | None:
    """The message of a trainer ERROR line, else None (C++ lines included, whatever they say)."""
    match = contract.TRAINER_LOG_LINE.match(line)
    if match is None or match.group("level") != "ERROR":
        return None
    return match.group("message").strip()


class ConsoleFilter:
    """Decides line by line, for one worker's stream, what the console shows.

    A C++ message may span lines (its continuation lines carry no prefix): after a C++
    line, every line is hidden until one starts a record of the trainer's own.
    """

    def __init__(self, verbose: bool) -> None:
        self._verbose = verbose
        self._in_cpp_message = False

    def shows(self, line: str) -> bool:
        if contract.is_cpp_log_start(line):
            self._in_cpp_message = True
        elif self._in_cpp_message and starts_own_record(line):
            self._in_cpp_message = False
        return self._verbose or not self._in_cpp_message
