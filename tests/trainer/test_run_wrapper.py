"""The worker wrapper (`python -m trainer.run -- CMD`) with real processes, no TensorFlow.

The programs here are tiny Python scripts: what is under test is what the wrapper checks
before they start, what they see, what reaches them, and how their exit is reported.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from launcher.core import contract
from trainer import run
from trainer.watchdog import Watchdog, frozen_for

REPO = Path(__file__).resolve().parents[2]
WRAPPER = [sys.executable, "-m", contract.WRAPPER_MODULE]
TIMEOUT = 120


def _env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "TFLAUNCH_"))}
    env.pop(contract.ENV_WORKER_INDEX, None)
    env["PYTHONPATH"] = str(REPO)
    return {**env, **(extra or {})}


def wrapper(
    flags: Sequence[str], program: str, extra_env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WRAPPER, *flags, "--", sys.executable, "-c", program],
        env=_env(extra_env), capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip


def tf_config(addresses: Sequence[str], index: int) -> str:
    return json.dumps(
        {"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": index}}
    )


DUMP_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


def test_the_program_gets_the_documented_environment(tmp_path: Path) -> None:
    done = wrapper(
        ["--checkpoint-dir", str(tmp_path / "ckpt"), "--model-dir", str(tmp_path / "model")],
        DUMP_ENV,
        {contract.ENV_RESTARTS: "2"},
    )
    assert done.returncode == 0, done.stderr
    env = json.loads(done.stdout)
    assert env[contract.ENV_CHECKPOINT_DIR] == str(tmp_path / "ckpt")
    assert env[contract.ENV_MODEL_DIR] == str(tmp_path / "model")
    assert (tmp_path / "ckpt").is_dir() and (tmp_path / "model").is_dir()
    assert env[contract.ENV_WORKER_INDEX_PUBLIC] == "0"
    assert env[contract.ENV_NUM_WORKERS] == "1"
    assert env[contract.ENV_RESTARTS] == "2"
    assert env[contract.ENV_LEGACY_KERAS] == "1"
    assert contract.ENV_TF_CONFIG not in env


def test_a_legacy_keras_choice_of_the_user_is_kept() -> None:
    done = wrapper([], DUMP_ENV, {contract.ENV_LEGACY_KERAS: "0"})
    assert json.loads(done.stdout)[contract.ENV_LEGACY_KERAS] == "0"


def test_cpu_only_keeps_tensorflow_off_cuda() -> None:
    done = wrapper(["--expect-gpus", "0"], DUMP_ENV)
    assert json.loads(done.stdout)["TF_ENABLED_DEVICE_TYPES"] == "CPU"


@pytest.mark.parametrize(
    ("program_exit", "wrapper_exit"),
    [(0, 0), (78, 78), (79, 79), (1, 1), (2, 1), (75, 1), (3, 1)],
)
def test_the_programs_exit_is_mapped_to_the_contract(program_exit: int, wrapper_exit: int) -> None:
    done = wrapper([], f"import sys; sys.exit({program_exit})")
    assert done.returncode == wrapper_exit


def test_a_program_killed_by_a_signal_exits_1() -> None:
    done = wrapper([], "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert done.returncode == 1
    assert "was killed by SIGKILL" in done.stderr


def test_a_config_error_of_the_program_is_quoted_and_not_retried() -> None:
    done = wrapper([], "import sys; sys.exit('no data at /data/train: set --data')")
    assert done.returncode == 1  # sys.exit(str) is exit 1: an ordinary failure
    done = wrapper([], "import sys; print('no data at /data/train', file=sys.stderr); sys.exit(78)")
    assert done.returncode == contract.EXIT_CONFIG_ERROR
    last = done.stderr.strip().splitlines()[-1]
    match = contract.TRAINER_LOG_LINE.match(last)
    assert match and match.group("level") == "ERROR", last
    assert match.group("message") == "no data at /data/train (the program exited 78)"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{not json", "TF_CONFIG is not valid JSON"),
        (tf_config(["127.0.0.1:1", "127.0.0.1:2"], 2), "task.index 2 is out of range"),
        (tf_config(["127.0.0.1:1", "127.0.0.1:1"], 0), "lists '127.0.0.1:1' twice"),
    ],
)
def test_a_bad_tf_config_stops_the_worker_before_the_program_runs(
    tmp_path: Path, raw: str, says: str
) -> None:
    marker = tmp_path / "ran"
    done = wrapper([], f"open({str(marker)!r}, 'w')", {contract.ENV_TF_CONFIG: raw})
    assert done.returncode == contract.EXIT_CONFIG_ERROR
    assert says in done.stderr
    assert not marker.exists()


def test_a_worker_index_that_disagrees_with_tf_config_is_a_config_error(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    raw = tf_config(["127.0.0.1:1", "127.0.0.1:2"], 0)
    done = wrapper(
        [], f"open({str(marker)!r}, 'w')",
        {contract.ENV_TF_CONFIG: raw, contract.ENV_WORKER_INDEX: "1"},
    )  # fmt: skip
    assert done.returncode == contract.EXIT_CONFIG_ERROR
    assert "task.index is 0" in done.stderr
    assert not marker.exists()


def test_an_unreachable_peer_is_named_before_the_program_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    ports = free_ports(2)
    raw = tf_config([f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"], 0)
    done = wrapper(
        ["--rendezvous-timeout", "2"], f"open({str(marker)!r}, 'w')", {contract.ENV_TF_CONFIG: raw}
    )
    assert done.returncode == contract.EXIT_RENDEZVOUS_TIMEOUT
    assert f"127.0.0.1:{ports[1]}" in done.stderr
    assert "never became reachable" in done.stderr
    assert not marker.exists()


def free_ports(count: int) -> list[int]:
    from launcher.local.runner import free_ports as ports

    return ports(count)


def test_two_wrappers_meet_and_their_programs_see_tf_config_untouched() -> None:
    ports = free_ports(2)
    addresses = [f"127.0.0.1:{port}" for port in ports]
    processes = [
        subprocess.Popen(
            [*WRAPPER, "--", sys.executable, "-c", DUMP_ENV],
            env=_env(
                {contract.ENV_TF_CONFIG: tf_config(addresses, i), contract.ENV_WORKER_INDEX: str(i)}
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for i, process in enumerate(processes):
        out, err = process.communicate(timeout=TIMEOUT)
        assert process.returncode == 0, err
        env = json.loads(out)
        assert env[contract.ENV_TF_CONFIG] == tf_config(addresses, i)
        assert env[contract.ENV_WORKER_INDEX_PUBLIC] == str(i)
        assert env[contract.ENV_NUM_WORKERS] == "2"


TRAP_TERM = """
import signal, sys, time
def stop(signum, frame):
    print("program got", signal.Signals(signum).name, flush=True)
    sys.exit({code})
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
print("ready", flush=True)
time.sleep(120)
"""


def _started(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"


@pytest.mark.parametrize(
    ("sig", "code", "expected"),
    [(signal.SIGTERM, 79, 79), (signal.SIGINT, 0, 0), (signal.SIGTERM, 143, 1)],
)
def test_sigterm_and_sigint_to_the_wrapper_reach_the_program(
    sig: signal.Signals, code: int, expected: int
) -> None:
    process = subprocess.Popen(
        [*WRAPPER, "--", sys.executable, "-c", TRAP_TERM.format(code=code)],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _started(process)
    process.send_signal(sig)
    out, err = process.communicate(timeout=TIMEOUT)
    assert f"program got {sig.name}" in out
    assert process.returncode == expected, err


def test_the_program_is_registered_for_signals_before_its_output_is_passed_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whoever saw the program print (the test above, a user at a terminal) may signal at
    once; that signal must reach the program, not stop the wrapper as one before it."""
    registered_at_pump_start: list[bool] = []

    class RecordingThread(threading.Thread):
        def start(self) -> None:
            registered_at_pump_start.append(bool(run._running))
            super().start()

    watchdog = run.Watchdog(exit_fn=print)
    monkeypatch.setattr(run.threading, "Thread", RecordingThread)
    monkeypatch.setattr(run, "_running", [])
    program = run.start([sys.executable, "-c", "pass"], _env(), watchdog)
    assert program.finish() == 0
    watchdog.stop()
    assert registered_at_pump_start == [True, True]


def test_a_program_that_ignores_sigterm_is_reported_by_its_signal() -> None:
    program = "import signal, time; print('ready', flush=True); time.sleep(120)"
    process = subprocess.Popen(
        [*WRAPPER, "--", sys.executable, "-c", program],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _started(process)
    process.terminate()
    _, err = process.communicate(timeout=TIMEOUT)
    assert process.returncode == 1
    # Stopped as asked (tflaunch stopping the group, a pod deleted): not an ERROR record,
    # which `tflaunch local` would show among the reasons of a failure.
    (record,) = [line for line in err.splitlines() if "SIGTERM, as asked" in line]
    assert " INFO the program stopped on SIGTERM, as asked (exit 1)" in record
    assert " ERROR " not in err


def test_no_program_outlives_a_killed_wrapper(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    program = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
        "print('ready', flush=True); time.sleep(120)"
    )
    process = subprocess.Popen(
        [*WRAPPER, "--", sys.executable, "-c", program],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _started(process)
    child = int(pid_file.read_text())
    process.kill()
    process.communicate(timeout=TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_silent_program_is_stopped_by_the_stall_watchdog() -> None:
    done = wrapper(["--stall-timeout", "1"], "import time; time.sleep(120)")
    assert done.returncode == 1
    assert "no output, no checkpoint written" in done.stderr


def test_checkpoints_written_keep_a_silent_program_alive(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    program = (
        "import os, time\n"
        "for i in range(12):\n"
        "    time.sleep(0.5)\n"
        f"    open(os.path.join({str(ckpt)!r}, f'ckpt-{{i}}'), 'w').write('x')\n"
    )
    done = wrapper(["--stall-timeout", "3", "--checkpoint-dir", str(ckpt)], program)
    assert done.returncode == 0, done.stderr


FREEZES = (
    "import os, signal, time\n"
    "from trainer.watchdog import Watchdog\n"
    "alive = os.environ['TFLAUNCH_ALIVE_FILE']\n"
    "watchdog = Watchdog(alive_file=alive, frozen_after=1, poll_seconds=0.1)\n"
    "time.sleep(0.5)\n"
    "os.kill(os.getpid(), signal.SIGSTOP)\n"
)


def test_a_frozen_program_is_stopped_as_a_stall_once_its_watchdog_stops_writing() -> None:
    """SIGSTOP freezes the program's own watchdog too: the wrapper, which runs on, stops it
    once the watchdog's file is older than its threshold (no --stall-timeout needed)."""
    start = time.monotonic()
    done = wrapper([], FREEZES)

    assert done.returncode == contract.EXIT_TRANSIENT, done.stderr
    assert "no progress for 1s: the program froze (its stall watchdog stopped)" in done.stderr
    assert time.monotonic() - start < TIMEOUT / 2


def test_a_running_watchdog_writes_its_threshold_and_is_not_frozen(tmp_path: Path) -> None:
    """Armed or not: the thread runs whenever the program is not frozen."""
    alive = tmp_path / "alive"
    watchdog = Watchdog(
        exit_fn=lambda code: None, poll_seconds=0.05, alive_file=str(alive), frozen_after=30
    )
    time.sleep(0.3)
    watchdog.stop()

    assert alive.read_text() == "30\n"
    assert frozen_for(str(alive)) is None  # written a moment ago
    assert frozen_for(str(alive), now=lambda: time.time() + 31) == 30
    alive.write_text("0\n")  # no stall timeout: never frozen
    assert frozen_for(str(alive), now=lambda: time.time() + 3600) is None
    assert frozen_for(str(tmp_path / "none")) is None


def test_output_keeps_a_program_alive() -> None:
    program = "import time\nfor i in range(12):\n    time.sleep(0.5); print(i, flush=True)\n"
    done = wrapper(["--stall-timeout", "3"], program)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(i) for i in range(12)]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "no program to run"),
        (["--"], "no program to run"),
        (["--expect-gpus", "x", "--", "true"], "--expect-gpus"),
        (["--stall-timeout", "-1", "--", "true"], "--stall-timeout"),
        (["--standby-after", "-1", "--", "true"], "--standby-after must be >= 0, got -1"),
    ],
)
def test_bad_wrapper_flags_are_config_errors(argv: list[str], says: str) -> None:
    done = subprocess.run(
        [*WRAPPER, *argv], env=_env(), capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == contract.EXIT_CONFIG_ERROR
    assert says in done.stderr


def test_a_missing_command_is_a_config_error() -> None:
    done = subprocess.run(
        [*WRAPPER, "--", "no-such-program-tflaunch"],
        env=_env(), capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert done.returncode == contract.EXIT_CONFIG_ERROR
    assert "cannot start 'no-such-program-tflaunch'" in done.stderr


def test_the_wrapper_does_not_import_tensorflow() -> None:
    program = "import sys; sys.exit(0)"
    code = (
        "import sys, runpy; sys.argv = ['run', '--', sys.executable, '-c', "
        f"{program!r}]\n"
        "try:\n    runpy.run_module('trainer.run', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code == 0, e.code\n"
        "assert 'tensorflow' not in sys.modules"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr


def test_exit_mapping_is_the_contract() -> None:
    assert [run.map_exit(c) for c in (0, 78, 79, 1, 75, -9, -15, 137)] == [0, 78, 79, 1, 1, 1, 1, 1]


def _wrapped_with_termination_log(
    tmp_path: Path, program: str
) -> tuple[subprocess.CompletedProcess[str], str]:
    """The wrapper running `python -c PROGRAM` with a termination log, as in a pod; what it
    left in the log."""
    log = tmp_path / "termination-log"
    log.touch()  # the kubelet creates it; elsewhere the wrapper writes nothing
    code = (
        "import sys, pathlib\n"
        "import trainer.run as run\n"
        f"run.TERMINATION_LOG = pathlib.Path({str(log)!r})\n"
        f"sys.exit(run.main(['--', sys.executable, '-c', {program!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=TIMEOUT
    )
    return done, log.read_text()


def test_a_failure_is_left_as_the_pods_termination_message(tmp_path: Path) -> None:
    program = "import sys; print('no data at /data', file=sys.stderr); sys.exit(78)"
    done, message = _wrapped_with_termination_log(tmp_path, program)
    assert done.returncode == contract.EXIT_CONFIG_ERROR, done.stderr
    assert message == "no data at /data (the program exited 78)"


def test_a_trainer_format_line_is_quoted_by_its_message_only(tmp_path: Path) -> None:
    line = "12:00:01 [worker 1/2] ERROR a peer died; exiting so that the group restarts"
    program = f"import sys; print({line!r}, file=sys.stderr); sys.exit(1)"
    done, message = _wrapped_with_termination_log(tmp_path, program)
    assert done.returncode == contract.EXIT_TRANSIENT, done.stderr
    assert message.startswith("a peer died; exiting so that the group restarts (the ")
    assert "ERROR 12:00:01" not in done.stderr


def test_a_preemption_leaves_the_saved_step_as_the_pods_termination_message(
    tmp_path: Path,
) -> None:
    """`tflaunch status`, `wait` and the operator read "resumed at step N" from here."""
    saved = (
        "12:00:01 [worker 1/2] WARNING preempted: every worker saved at step 70 (epoch 2, step "
        "30 of 40); exiting 79 so that the group restarts and resumes there"
    )
    program = (
        f"import sys; print({saved!r}, file=sys.stderr); "
        "print('/job:worker/replica:0/task:1', file=sys.stderr); sys.exit(79)"
    )  # a TensorFlow error's continuation line after it must not hide it
    done, message = _wrapped_with_termination_log(tmp_path, program)
    assert done.returncode == contract.EXIT_PREEMPTED, done.stderr
    assert contract.saved_step(message) == 70, message
    assert message.startswith("preempted: every worker saved at step 70"), message


# --- the wrapper's records and reasons, whatever the program printed last -------------------

KERAS_FRAME = "\r 3/70 [>....] - ETA: 5s - loss: 4.3331" + "\b" * 40


def _merged(program: str) -> str:
    """stdout and stderr in one stream, as `tflaunch local` and a pod's log read them."""
    done = subprocess.run(
        [*WRAPPER, "--", sys.executable, "-c", program], env=_env(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    return done.stdout


def test_a_record_starts_its_own_line_after_a_progress_bar_left_open() -> None:
    """Keras' bar (verbose=1) ends a frame with backspaces and no newline: the ERROR record
    after a kill mid-epoch must not be glued onto it, or the launcher cannot read it."""
    out = _merged(
        "import os, signal, sys\n"
        f"sys.stdout.write({KERAS_FRAME!r}); sys.stdout.flush()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    records = [contract.TRAINER_LOG_LINE.match(line) for line in out.splitlines()]
    errors = [m.group("message") for m in records if m and m.group("level") == "ERROR"]
    assert errors, repr(out)
    assert errors[-1].endswith("(the program was killed by SIGKILL)"), errors
    assert "loss: 4.3331 (the program" in errors[-1]  # the bar's last frame, clean


def test_a_line_left_open_on_stdout_is_ended_before_stderr_goes_on() -> None:
    """Keras' bar mid-epoch on stdout, then TensorFlow's C++ error on stderr: the C++ line
    must start its own line, or the console takes it for the program's output."""
    cpp = "E0000 00:00:1796119108.121838 10875 ring_alg.cc:291] Aborting RingReduce"
    out = _merged(
        "import sys, time\n"
        f"sys.stdout.write({KERAS_FRAME!r}); sys.stdout.flush(); time.sleep(0.5)\n"
        f"print({cpp!r}, file=sys.stderr, flush=True)\n"
    )
    assert cpp in out.splitlines(), repr(out)


def test_the_reason_is_the_exception_line_not_tensorflows_trailer() -> None:
    """TensorFlow appends `[[{{node ...}}]] [Op:...]` after the exception line."""
    out = _merged(
        "import sys\n"
        "print('Traceback (most recent call last):', file=sys.stderr)\n"
        "print('  File \"main.py\", line 3, in <module>', file=sys.stderr)\n"
        "print('tensorflow.python.framework.errors_impl.OutOfRangeError: End of sequence',"
        " file=sys.stderr)\n"
        "print('\\t [[{{node cond/IteratorGetNext}}]] [Op:__inference_train_step_1074]',"
        " file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    (error,) = [
        m.group("message")
        for m in map(contract.TRAINER_LOG_LINE.match, out.splitlines())
        if m and m.group("level") == "ERROR"
    ]
    assert error == "OutOfRangeError: End of sequence (the program exited 1)"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain", "plain"),
        ("\r 1/70 [.] - loss: 4.6\b\b\b\b\r 2/70 [.] - loss: 4.5", " 2/70 [.] - loss: 4.5"),
        ("\r 1/70 [.] - loss: 4.61\b\b\r70/70 [=] - 5s   \r", "70/70 [=] - 5s    4.61"),
        ("abc\b\bX", "aXc"),
    ],
)
def test_a_line_reads_as_a_terminal_shows_it(text: str, shown: str) -> None:
    assert contract.final_frame(text) == shown


def test_absls_banner_after_the_programs_last_line_is_not_its_reason() -> None:
    """absl prints its banner from a C++ thread, so it may come after the program's own
    error line (seen with a configuration error, exit 78): the reason stays the program's."""
    out = _merged(
        "import sys, time\n"
        "print('12:00:00 [worker 0/2] ERROR /data/mnist.npz is not a readable .npz file',"
        " file=sys.stderr, flush=True)\n"
        "time.sleep(0.2)\n"
        f"print({contract.CPP_LOG_BANNER + ' and are written to STDERR'!r}, file=sys.stderr)\n"
        "sys.exit(78)\n"
    )
    errors = [
        m.group("message")
        for m in map(contract.TRAINER_LOG_LINE.match, out.splitlines())
        if m and m.group("level") == "ERROR"
    ]
    assert errors[-1].startswith("/data/mnist.npz is not a readable .npz file"), errors
