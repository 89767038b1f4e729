"""Programs of the user's own (examples/custom/, and tiny scripts) under `tflaunch local`:
the same wrapper, TF_CONFIG, env and group-restart semantics as the pods."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.core import contract

ROOT = Path(__file__).resolve().parents[2]
HASH = re.compile(r"^\[worker (\d)\] weights sha256 ([0-9a-f]{64})$", re.MULTILINE)
TIMEOUT = 300


def _tflaunch(*args: str) -> list[str]:
    return [sys.executable, "-m", "launcher", "local", *args]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "TFLAUNCH_"))}


def _without_warnings(stderr: str) -> list[str]:
    """stderr's lines but the warnings before the start (these tiny programs create no
    MultiWorkerMirroredStrategy, which is warned about with several workers)."""
    return [
        line for line in stderr.strip().splitlines() if not line.startswith("tflaunch: warning:")
    ]


def _hashes(output: str) -> dict[int, str]:
    return {int(worker): digest for worker, digest in HASH.findall(output)}


@pytest.mark.tf
@pytest.mark.parametrize(
    ("spec", "quick"),
    [
        ("keras-mnist.yaml", ["--epochs", "2", "--steps-per-epoch", "5"]),
        ("custom-loop.yaml", ["--steps", "20", "--checkpoint-every", "10"]),
    ],
)
def test_an_example_trains_on_two_workers_to_the_same_weights(
    tmp_path: Path, spec: str, quick: list[str]
) -> None:
    run = subprocess.run(
        _tflaunch(str(ROOT / "examples" / "custom" / spec), "--workdir", str(tmp_path),
                  "--", *quick),
        capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    hashes = _hashes(run.stdout)
    assert set(hashes) == {0, 1}, run.stdout[-3000:]
    assert hashes[0] == hashes[1], "the workers' weights must be identical"
    assert "succeeded on all 2 worker(s): restarts=0" in run.stdout


def test_a_program_exiting_78_is_not_retried_and_its_message_reaches_the_user(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys, time\n"
        "if os.environ['TFLAUNCH_WORKER_INDEX'] == '1':\n"
        "    print('no training data at /data/shards: mount it or pass --data', file=sys.stderr)\n"
        "    sys.exit(78)\n"
        "time.sleep(60)\n"
    )
    run = subprocess.run(
        _tflaunch("--script", str(script), "--workdir", str(tmp_path / "run"),
                  "--set", "spec.backoffLimit=3"),
        capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
    )  # fmt: skip
    assert run.returncode == 3, run.stdout + run.stderr
    (line,) = _without_warnings(run.stderr)
    assert line.startswith("tflaunch: error: worker 1 exited 78 (configuration error)"), line
    assert "no training data at /data/shards: mount it or pass --data" in line
    assert line.count("configuration error") == 1 and line.count("not retried") == 1, line
    assert "restarting" not in run.stdout


@pytest.mark.tf
def test_a_killed_program_restarts_the_group_and_resumes_from_its_backup(tmp_path: Path) -> None:
    launcher = subprocess.Popen(
        _tflaunch(str(ROOT / "examples" / "custom" / "keras-mnist.yaml"),
                  "--workdir", str(tmp_path), "--", "--epochs", "4", "--steps-per-epoch", "10"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
    )  # fmt: skip
    try:
        backup = tmp_path / "checkpoints" / "backup"
        deadline = time.monotonic() + TIMEOUT
        while not (backup.exists() and any(backup.rglob("*.index"))):
            assert launcher.poll() is None, "finished before a backup was written"
            assert time.monotonic() < deadline, "no backup appeared"
            time.sleep(0.1)
        (program,) = _children(_children(launcher.pid)[1])  # worker 1's wrapper's child
        os.kill(program, signal.SIGKILL)
        output, _ = launcher.communicate(timeout=TIMEOUT)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, output[-4000:]
    (restart,) = [line for line in output.splitlines() if "restarting all 2 workers" in line]
    assert restart.startswith("tflaunch: worker 1 was killed by SIGKILL"), restart
    second = (tmp_path / "logs" / "worker-0.log").read_text().split("attempt 2 ---")[1]
    first_epoch = re.search(r"^Epoch (\d+)/4$", second, re.MULTILINE)
    assert first_epoch and int(first_epoch.group(1)) > 1, "the group must resume, not start over"
    hashes = _hashes(output)
    assert set(hashes) == {0, 1} and hashes[0] == hashes[1]


@pytest.mark.tf
def test_a_save_only_the_chief_makes_is_warned_about_then_failed_once_not_retried(
    tmp_path: Path,
) -> None:
    """Real TensorFlow: worker 1 finishes, the chief fails in the save's collectives
    (UnavailableError); every restart would train again to fail the same way."""
    run = subprocess.run(
        _tflaunch("--script", str(ROOT / "tests" / "data" / "chief_only_save.py"),
                  "--workdir", str(tmp_path), "--set", "spec.backoffLimit=3"),
        capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
    )  # fmt: skip
    assert run.returncode == 3, run.stdout[-3000:] + run.stderr[-3000:]
    warning, error = run.stderr.strip().splitlines()
    assert warning.startswith("tflaunch: warning: only the chief saves (chief_only_save.py:"), (
        warning
    )
    assert error.startswith(
        "tflaunch: error: worker 0 failed in a collective operation (UnavailableError) after "
        "worker 1 had finished the program (exit 0)"
    ), error
    assert "not retried" in error
    assert "restarting" not in run.stdout, run.stdout[-3000:]
    assert "[worker 1] worker 1 finished" in run.stdout


KERAS_WITH_PROGRESS = """\
import numpy as np
import tensorflow as tf
from trainer.progress import ProgressCallback

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=(512, 8)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, (x.sum(axis=1) > 0).astype("int64")))
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
    model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(data.repeat().batch(32), epochs=2, steps_per_epoch=4, verbose=0,
          callbacks=[ProgressCallback(global_batch_size=32)])  # the documented one line
"""


@pytest.mark.tf
def test_an_own_keras_program_with_the_progress_callback_gets_the_groups_progress(
    tmp_path: Path,
) -> None:
    from launcher.core import progress

    script = tmp_path / "train.py"
    script.write_text(KERAS_WITH_PROGRESS)
    run = subprocess.run(
        _tflaunch("--script", str(script), "--workers", "2", "--workdir", str(tmp_path / "run")),
        capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # Off a terminal: the chief's progress as tflaunch's own plain lines, one per epoch's end.
    for epoch in (1, 2):
        assert f"tflaunch: train: epoch {epoch}/2, step 4/4, loss " in run.stdout, run.stdout
    assert "TFLAUNCH_PROGRESS" not in run.stdout
    logs = tmp_path / "run" / "logs"
    chief = [progress.parse_line(line) for line in (logs / "worker-0.log").read_text().splitlines()]
    last = [p for p in chief if p is not None][-1]
    assert (last.epoch, last.step, last.eta_seconds) == (2, 4, 0) and last.images_per_sec
    assert progress.latest((logs / "worker-1.log").read_text().splitlines()) is None


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def test_an_own_programs_output_reaches_the_console_but_tensorflows_cpp_lines_do_not() -> None:
    import io

    from launcher.local.display import make_console

    stream = io.StringIO()
    console = make_console("job", 2, stream, verbose=False, env={}, own_program=True)
    for line in (
        "12:00:01 [worker 0/2] INFO starting python train.py",
        "E0000 00:00:1796050260.220975 5641 cuda_platform.cc:52] failed call to cuInit",
        "Epoch 1/3",  # after a C++ line: the program's output, not its continuation
        "12:00:09 [worker 0/2] ERROR no data (exit 78)",
        "weights sha256 " + "0" * 64,
    ):
        console.line(0, line)
    console.close()
    shown = [line for line in stream.getvalue().splitlines() if line.startswith("[worker")]
    assert shown == [
        "[worker 0] Epoch 1/3",
        "[worker 0] 12:00:09 [worker 0/2] ERROR no data (exit 78)",
        "[worker 0] weights sha256 " + "0" * 64,
    ]


def test_an_own_programs_console_hides_cpp_continuations_and_the_other_workers_bars() -> None:
    """Seen on a successful run of TensorFlow's Keras tutorial: the peer's heartbeat error
    continues over two unprefixed lines; and every worker prints Keras' bar."""
    import io

    from launcher.local.display import make_console

    stream = io.StringIO()
    console = make_console("job", 2, stream, verbose=False, env={}, own_program=True)
    bar = "70/70 [==============================] - 5s 60ms/step - loss: 4.2 - accuracy: 0.5"
    for index, line in (
        (0, "Epoch 1/3"),
        (1, "Epoch 1/3"),
        (0, bar),
        (1, bar),
        (1, "E0000 00:00:1796117755.286692 4345 base_collective_executor.cc:252] StartAbort"),
        (1, "Additional GRPC error information from remote target /job:worker/replica:0/task:0"),
        (1, ':UNKNOWN:Error received from peer  {grpc_message:"failed", grpc_status:14}'),
        (1, "The tasks have crashed. Check the task logs for an earlier error to debug further."),
        (1, "The error could be from a previous operation. Restart your program to reset."),
        (1, "\t [[{{node CollectiveReduceV2}}]] [type.googleapis.com/tensorflow.DerivedStatus='']"),
        (1, "saved"),
    ):
        console.line(index, line)
    console.close()
    shown = [line for line in stream.getvalue().splitlines() if line.startswith("[worker")]
    assert shown == ["[worker 0] Epoch 1/3", f"[worker 0] {bar}", "[worker 1] saved"]


# --- programs of several files, and what the console says about them (no TensorFlow) -------


def _two_files(root: Path, setup: str, main_tail: str = "") -> Path:
    """TensorFlow's tutorials' layout: main.py imports its neighbour mnist_setup.py."""
    root.mkdir()
    (root / "mnist_setup.py").write_text(setup)
    (root / "main.py").write_text("import mnist_setup\n" + main_tail)
    return root / "main.py"


def test_the_same_error_on_every_worker_of_a_two_file_program_is_reported_once(
    tmp_path: Path,
) -> None:
    """The neighbour module is found (it was: ModuleNotFoundError), and a misspelled name,
    identical on every worker before any step, is the program's error: not retried."""
    main = _two_files(tmp_path / "prog", "import os\nmodel = bulid_model()\n")
    run = subprocess.run(
        _tflaunch("--script", str(main), "--workers", "2", "--workdir", str(tmp_path / "run")),
        capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
    )  # fmt: skip
    assert run.returncode == 3, run.stdout + run.stderr
    assert "ModuleNotFoundError" not in run.stdout + run.stderr
    (line,) = _without_warnings(run.stderr)
    assert "NameError: name 'bulid_model' is not defined" in line, line
    assert "not retried" in line and line.count("NameError") == 1, line
    assert "restarting" not in run.stdout
    assert (tmp_path / "run" / "logs" / "worker-0.log").read_text().count("attempt") == 1


def test_one_local_worker_reads_tf_config_as_the_tutorials_do(tmp_path: Path) -> None:
    """TensorFlow's tutorials read TF_CONFIG unconditionally (KeyError without it); a pod of
    a one-worker job has one, and so does a local run of one worker."""
    script = tmp_path / "main.py"
    script.write_text(
        "import json, os\n"
        "tf_config = json.loads(os.environ['TF_CONFIG'])\n"
        "workers = tf_config['cluster']['worker']\n"
        "print('workers', len(workers), 'index', tf_config['task']['index'])\n"
    )
    run = subprocess.run(
        _tflaunch("--script", str(script), "--workers", "1", "--workdir", str(tmp_path / "run")),
        capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[worker 0] workers 1 index 0" in run.stdout


def test_each_local_worker_writes_to_its_own_directory_and_the_callers_stays_clean(
    tmp_path: Path,
) -> None:
    """TensorFlow's tutorials write `./training_checkpoints` and h5 files: in pods each worker
    has its own filesystem, so locally each has its own working directory too (shared, two
    workers locking one h5 file failed with BlockingIOError)."""
    script = tmp_path / "main.py"
    script.write_text(
        "import json, os\n"
        "index = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
        "with open('weights.h5', 'x') as f:\n"  # 'x': fails if another worker made it
        "    f.write(str(index))\n"
    )
    caller = tmp_path / "caller"
    caller.mkdir()
    run = subprocess.run(
        _tflaunch("--script", str(script), "--workers", "2", "--workdir", str(tmp_path / "run")),
        capture_output=True, text=True, timeout=TIMEOUT, env=_env(), cwd=caller,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    workers = tmp_path / "run" / "workers"
    assert [(workers / f"worker-{i}" / "weights.h5").read_text() for i in (0, 1)] == ["0", "1"]
    assert list(caller.iterdir()) == []
    assert f"each worker's own files in {workers}/worker-<i>" in run.stdout.splitlines()[-1]


def test_worker_logs_are_written_while_the_program_runs(tmp_path: Path) -> None:
    """`tail -f WORKDIR/logs/worker-0.log` follows a run: each line is flushed."""
    script = tmp_path / "train.py"
    script.write_text("import time\nprint('epoch 1 done', flush=True)\ntime.sleep(120)\n")
    launcher = subprocess.Popen(
        _tflaunch("--script", str(script), "--workers", "1", "--workdir", str(tmp_path / "run")),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(),
    )  # fmt: skip
    log = tmp_path / "run" / "logs" / "worker-0.log"
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and "epoch 1 done" in log.read_text()):
            assert launcher.poll() is None, "ended early"
            assert time.monotonic() < deadline, f"not in the log while running: {log.read_text()!r}"
            time.sleep(0.2)
    finally:
        launcher.send_signal(signal.SIGINT)
        try:
            launcher.wait(timeout=60)
        finally:
            launcher.kill()


IGNORES_SIGTERM = """\
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as MWMS programs do, in effect
print('training', flush=True)
time.sleep(float(sys.argv[1]))
print('trained', flush=True)
"""


@pytest.mark.parametrize(("seconds", "grace", "code"), [(4, 60, 0), (600, 2, 130)])
def test_ctrl_c_on_a_program_that_ignores_sigterm_says_what_happens(
    tmp_path: Path, seconds: int, grace: int, code: int
) -> None:
    """Ctrl-C: SIGTERM, then SIGKILL after the grace period, and the words say so; a run
    whose workers all finished (within the grace period) is a success."""
    script = tmp_path / "train.py"
    script.write_text(IGNORES_SIGTERM)
    launcher = subprocess.Popen(
        _tflaunch("--script", str(script), "--workers", "2", "--workdir", str(tmp_path / "run"),
                  "--set", f"spec.terminationGracePeriodSeconds={grace}",
                  "--set", f"spec.args=[{seconds}]"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
    )  # fmt: skip
    try:
        assert launcher.stdout is not None
        seen = []
        for line in launcher.stdout:
            seen.append(line)
            if all(f"[worker {i}] training" in "".join(seen) for i in (0, 1)):
                break
        launcher.send_signal(signal.SIGINT)
        output = "".join(seen) + launcher.communicate(timeout=TIMEOUT)[0]
    finally:
        launcher.kill()
    assert launcher.returncode == code, output
    (stopping,) = [line for line in output.splitlines() if "stopping" in line]
    assert "SIGKILL to any still running after" in stopping, stopping
    assert "every worker saves" not in stopping
    if code == 0:
        assert "succeeded on all 2 worker(s)" in output
        assert "model dir" not in output  # the program saved nothing there


@pytest.mark.parametrize(
    ("imports", "legacy", "why"),
    [("import json\n", "1", "nothing in it needs Keras 3"),
     ("if os.environ.get('NEVER_SET'):\n    import keras\n", "0", "print_env.py:3 imports keras")],
)  # fmt: skip
def test_tflaunch_picks_the_keras_as_in_a_pod_and_says_which_and_why_before_the_start(
    tmp_path: Path, imports: str, legacy: str, why: str
) -> None:
    """TF_USE_LEGACY_KERAS comes from spec.keras (auto: what the program shows), as in a
    pod: a shell's value is not used, and a different one is said."""
    script = tmp_path / "print_env.py"
    script.write_text(
        f"import os\n{imports}print('legacy keras', os.environ['TF_USE_LEGACY_KERAS'])\n"
    )
    run = subprocess.run(
        _tflaunch("--script", str(script), "--workers", "1", "--workdir", str(tmp_path / "run")),
        capture_output=True, text=True, timeout=TIMEOUT,
        env={**_env(), "TF_USE_LEGACY_KERAS": "1" if legacy == "0" else "0"},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"[worker 0] legacy keras {legacy}" in run.stdout
    (env_note,) = run.stderr.strip().splitlines()
    assert env_note.startswith("tflaunch: note: TF_USE_LEGACY_KERAS=")
    assert f"every worker runs with TF_USE_LEGACY_KERAS={legacy}, as in a pod" in env_note
    (keras_note,) = [line for line in run.stdout.splitlines() if "the program runs on" in line]
    assert keras_note.startswith("tflaunch: print-env: the program runs on "), keras_note
    assert why in keras_note, keras_note


TUTORIAL_LAYOUT = ROOT / "tests" / "data" / "tutorial_layout"


@pytest.mark.tf
def test_a_tutorial_layout_program_killed_mid_epoch_is_named_by_its_signal(tmp_path: Path) -> None:
    """main.py + mnist_setup.py, Keras' default progress bar, worker 1's program SIGKILLed
    mid-epoch 2 (its bar left without a newline): the cause is worker 1 and SIGKILL, the
    group restarts from the beginning (the program keeps no checkpoint) and trains; the
    console shows the chief's bar as one clean line per epoch."""
    run = subprocess.run(
        _tflaunch("--script", str(TUTORIAL_LAYOUT / "main.py"), "--workers", "2",
                  "--workdir", str(tmp_path), "--", "--epochs", "2", "--steps-per-epoch", "8",
                  "--kill-worker", "1", "--kill-at", "2", "4"),
        capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    (restart,) = [line for line in run.stdout.splitlines() if "restarting all 2 workers" in line]
    assert restart.startswith("tflaunch: worker 1 was killed by SIGKILL"), restart
    assert restart.endswith(
        f"restarting from the beginning (no checkpoint in {tmp_path / 'checkpoints'})"
    )
    assert "succeeded on all 2 worker(s): restarts=1" in run.stdout
    bars = [line for line in run.stdout.splitlines() if re.search(r"\] \d+/8 \[", line)]
    assert all(line.startswith("[worker 0] ") for line in bars), bars  # the chief's only
    # One per finished epoch: epoch 1 of the first attempt, epochs 1 and 2 of the second.
    assert sum(line.startswith("[worker 0] 8/8 [") for line in bars) == 3, bars
    assert "\b" not in run.stdout and "\r" not in run.stdout
    log = (tmp_path / "logs" / "worker-1.log").read_text()
    killed = [
        m for m in map(contract.TRAINER_LOG_LINE.match, log.splitlines())
        if m and "killed by SIGKILL" in m.group("message")
    ]  # fmt: skip
    assert killed, "the wrapper's record must start its own line"


def test_a_local_run_writes_the_programs_layout_and_removes_only_its_own_stale_files(
    tmp_path: Path,
) -> None:
    from launcher.core.load import load_job
    from launcher.local import paths as paths_lib

    root = tmp_path / "prog"
    main = _two_files(root, "X = 1\n")
    paths = paths_lib.LocalPaths(tmp_path / "run")
    paths.script_dir.mkdir(parents=True)
    (paths.script_dir / "users_own.txt").write_text("keep me")
    (root / "old.py").write_text("")
    main.write_text("import mnist_setup\nimport old\n")
    paths_lib.write_script(load_job(None, [("spec.script", str(main))]), paths)
    assert (paths.script_dir / "old.py").exists()
    main.write_text("import mnist_setup\n")
    paths_lib.write_script(load_job(None, [("spec.script", str(main))]), paths)
    assert not (paths.script_dir / "old.py").exists()  # a stale module is not importable
    assert (paths.script_dir / "mnist_setup.py").read_text() == "X = 1\n"
    assert (paths.script_dir / "users_own.txt").read_text() == "keep me"


def test_a_spec_without_an_image_runs_locally_and_only_render_asks_for_one(
    tmp_path: Path,
) -> None:
    """`tflaunch local` runs no image: demanding spec.image there only got in the way."""
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "apiVersion: tflaunch.dev/v1alpha1\nkind: MultiWorkerJob\nmetadata: {name: mine}\n"
        "spec:\n  workers: 1\n  command: [python, -c, \"print('hi')\"]\n"
    )
    run = subprocess.run(
        _tflaunch(str(spec), "--workdir", str(tmp_path / "run")),
        capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[worker 0] hi" in run.stdout
    render = subprocess.run(
        [sys.executable, "-m", "launcher", "render", str(spec)],
        capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
    )  # fmt: skip
    assert render.returncode == 2 and "spec.image: is required" in render.stderr
