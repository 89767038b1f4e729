"""`tflaunch local`: N trainer processes with the same TF_CONFIG builder and the cluster's
failure semantics (whole-group restart, config errors not retried, no orphans)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.core import contract, progress
from launcher.core.load import load_job
from launcher.core.worker_end import GroupEnd
from launcher.local import runner
from launcher.local.isolation import Isolation
from launcher.local.paths import LocalPaths, resume_point
from launcher.local.runner import worker_commands

from .conftest import LOCAL_RUN_EPOCHS, LOCAL_RUN_EVAL_BATCH, LocalRun, default_env

# --- the pure parts ------------------------------------------------------------------------


def test_every_local_worker_gets_the_same_cluster_and_its_own_index(tmp_path):
    job = load_job(None, [("spec.workers", 3), ("spec.trainer.globalBatchSize", 96)])
    commands = worker_commands(job, LocalPaths(tmp_path), [5001, 5002, 5003], 0, None)
    configs = [json.loads(env["TF_CONFIG"]) for _, env in commands]
    assert {json.dumps(c["cluster"]) for c in configs} == {
        json.dumps({"worker": ["127.0.0.1:5001", "127.0.0.1:5002", "127.0.0.1:5003"]})
    }
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]


def test_local_workers_get_the_pods_environment_and_flags(tmp_path):
    job = load_job(None, [("spec.env", {"EXTRA": "1"})])
    (argv, env), _ = worker_commands(job, LocalPaths(tmp_path), [1, 2], 2, "/d/m.npz")
    assert env[contract.ENV_LEGACY_KERAS] == "1"
    assert env["EXTRA"] == "1"
    assert env[contract.ENV_RESTARTS] == "2"
    assert argv[1:3] == ["-m", contract.WRAPPER_MODULE]  # the pods' entrypoint
    program = argv[argv.index("--") + 1 :]
    assert program[1:3] == ["-m", "trainer"]
    assert program[program.index("--checkpoint-dir") + 1] == str(tmp_path / "checkpoints")
    assert program[program.index("--data") + 1] == "/d/m.npz"
    assert program[program.index("--global-batch-size") + 1] == "256"


def test_an_own_program_runs_through_the_same_wrapper_with_the_pods_flags(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    job = load_job(
        None,
        [("spec.script", str(script)), ("spec.args", ["--epochs", "2"]),
         ("spec.stallTimeoutSeconds", 60), ("spec.gpusPerWorker", 1)],
        local=True,
    )  # fmt: skip
    paths = LocalPaths(tmp_path / "run")
    (argv, env), _ = worker_commands(job, paths, [1, 2], 0, "/d/m.npz", extra_args=["--x"])
    cut = argv.index("--")
    wrapper, program = argv[:cut], argv[cut + 1 :]
    assert wrapper[1:3] == ["-m", contract.WRAPPER_MODULE]
    assert wrapper[wrapper.index("--stall-timeout") + 1] == "60"
    assert wrapper[wrapper.index("--expect-gpus") + 1] == "1"
    assert wrapper[wrapper.index("--checkpoint-dir") + 1] == str(paths.checkpoint_dir)
    assert program == [argv[0], str(paths.script_dir / "train.py"), "--epochs", "2", "--x"]
    assert json.loads(env["TF_CONFIG"])["task"]["index"] == 0


def test_python_in_an_own_command_is_the_interpreter_tflaunch_runs_in(tmp_path):
    job = load_job(None, [("spec.command", ["python", "train.py"])])
    (argv, _), _ = worker_commands(job, LocalPaths(tmp_path), [1, 2], 0, None)
    assert argv[argv.index("--") + 1 :] == [argv[0], "train.py"]


@pytest.mark.parametrize("verbose", [False, True])
def test_verbose_asks_the_workers_for_tensorflows_own_log_lines(tmp_path, monkeypatch, verbose):
    monkeypatch.delenv(contract.ENV_LOG_LEVEL, raising=False)
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    job = load_job(None, [])
    (_, env), _ = worker_commands(job, LocalPaths(tmp_path), [1, 2], 0, None, verbose=verbose)
    assert env.get(contract.ENV_LOG_LEVEL) == ("debug" if verbose else None)
    assert "TF_CPP_MIN_LOG_LEVEL" not in env  # the trainer picks it from the log level


def test_a_single_worker_gets_its_own_tf_config_as_in_a_pod(tmp_path, monkeypatch):
    """TensorFlow's tutorials read TF_CONFIG unconditionally; a pod of a one-worker job has
    one, so a local run of one worker has one too (and never the shell's stale one)."""
    monkeypatch.setenv("TF_CONFIG", '{"stale": true}')
    job = load_job(None, [("spec.workers", 1)])
    ((_, env),) = worker_commands(job, LocalPaths(tmp_path), [1], 0, None)
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"worker": ["127.0.0.1:1"]},
        "task": {"type": "worker", "index": 0},
    }


@pytest.mark.parametrize(
    "spec_file, extra, expected",
    [
        (None, (), (None, ())),
        ("job.yaml", ("--seed", "1"), ("job.yaml", ("--seed", "1"))),
        ("--seed", ("1",), (None, ("--seed", "1"))),  # `tflaunch local -- --seed 1`
        ("-", ("--seed", "1"), ("-", ("--seed", "1"))),  # stdin stays a spec
    ],
)
def test_trainer_args_after_double_dash_never_become_the_spec(spec_file, extra, expected):
    from launcher.cli.local_cmd import split_trainer_args

    assert split_trainer_args(spec_file, extra) == expected


@pytest.mark.parametrize(
    "codes, restarts, expected",
    [
        ((0, 0), 0, "done"),
        ((1, None), 0, "restart"),
        ((-9, None), 2, "restart"),
        ((1, None), 3, "fail"),
        ((contract.EXIT_CONFIG_ERROR, None), 0, "fail"),
        ((contract.EXIT_RENDEZVOUS_TIMEOUT, None), 0, "restart"),
    ],
)
def test_group_restart_policy_matches_the_clusters(codes, restarts, expected):
    assert GroupEnd.of(codes).next_step(restarts, backoff_limit=3) == expected


PEER_DIED = "training failed because a peer died, froze or restarted (UnavailableError: ...)"


@pytest.mark.parametrize(
    "codes, errors, expected",
    [
        # The survivor may exit before the poll sees the killed worker: the signal is the
        # cause, the survivor's "a peer died" only its consequence.
        ((1, -9), (PEER_DIED, None), "worker 1 was killed by SIGKILL (worker 0 exited 1 too)"),
        ((-9, None), (None, None), "worker 0 was killed by SIGKILL"),
        ((None, 78), (None, "bad trainer flag: unrecognized arguments: --epochz 3"),
         "worker 1 exited 78 (configuration error): bad trainer flag: unrecognized "
         "arguments: --epochz 3"),
        ((75, 1), ("peers never came: 127.0.0.1:2", PEER_DIED),
         "worker 0 exited 75 (peers never came): peers never came: 127.0.0.1:2 "
         "(worker 1 exited 1 too)"),
        ((None, 1), (None, PEER_DIED), f"worker 1 exited 1: {PEER_DIED}"),
    ],
)  # fmt: skip
def test_a_failed_attempt_names_the_cause_first_with_the_trainers_own_reason(
    codes, errors, expected
):
    assert GroupEnd.of(codes, errors).describe() == expected


DEADLINE = ":DEADLINE_EXCEEDED:Deadline Exceeded {grpc_status:4} (the program exited 1)"
KILLED_MID_EPOCH = "3/70 [>....] - ETA: 5s - loss: 4.3331 (the program was killed by SIGKILL)"


@pytest.mark.parametrize("order", ["killed worker first", "survivor first"])
def test_a_program_killed_by_a_signal_is_the_cause_whatever_order_the_exits_came_in(order):
    """Under load the survivor's collective timeout can reach tflaunch before the killed
    worker's wrapper says its program died of SIGKILL (both wrappers exit 1)."""
    codes = (1, 1) if order == "killed worker first" else (1, None)
    attempt = GroupEnd.of(codes, (DEADLINE, KILLED_MID_EPOCH), (), (None, "SIGKILL"))
    assert attempt.describe().startswith(
        "worker 1 was killed by SIGKILL: 3/70 [>....] - ETA: 5s - loss: 4.3331 (worker 0 "
    ), attempt.describe()


NAME_ERROR = "NameError: name 'mnist_setpu' is not defined (the program exited 1)"


@pytest.mark.parametrize(
    ("codes", "errors", "signals", "expected"),
    [
        ((1, 1), (NAME_ERROR, NAME_ERROR), (None, None), "fail"),  # the program's own
        ((1, None), (NAME_ERROR, None), (None, None), "restart"),  # not seen on every worker
        ((1, 1), (NAME_ERROR, "ValueError: x (the program exited 1)"), (None, None), "restart"),
        ((1, 1), (DEADLINE, DEADLINE), (None, None), "restart"),  # not an exception line
        ((1, 1), ("UnavailableError: peer lost (the program exited 1)",) * 2, (None, None),
         "restart"),  # TensorFlow's word for a lost peer: a fault of the group
        ((1, 1), (NAME_ERROR, NAME_ERROR), ("SIGKILL", None), "restart"),
        ((1, 1), (NAME_ERROR, NAME_ERROR), (None, "SIGKILL"), "restart"),
    ],
)  # fmt: skip
def test_the_same_program_error_on_every_worker_is_not_retried(codes, errors, signals, expected):
    assert GroupEnd.of(codes, errors, (), signals).next_step(0, backoff_limit=3) == expected


def test_the_final_line_of_a_program_error_says_it_once_and_why_not_retried(tmp_path):
    attempt = GroupEnd.of((1, 1), (NAME_ERROR, NAME_ERROR))
    text = runner._failure(attempt, load_job(None), 0, LocalPaths(tmp_path), Isolation())
    assert text.count("NameError") == 1 and text.count("not retried") == 1, text
    assert "gave up" not in text and "restarts" not in text


def test_the_final_line_of_a_configuration_error_says_not_retried_once(tmp_path):
    error = "no data at /data (the program exited 78)"
    attempt = GroupEnd.of((None, contract.EXIT_CONFIG_ERROR), (None, error))
    text = runner._failure(attempt, load_job(None), 0, LocalPaths(tmp_path), Isolation())
    assert text.startswith("worker 1 exited 78 (configuration error): no data at /data; ")
    assert text.count("configuration error") == 1 and text.count("not retried") == 1, text
    assert "exited 78)" not in text  # the program's 78 is the worker's 78: said once


COLLECTIVE_ABORTED = (
    "UnavailableError: {{function_node __wrapped__CollectiveReduceV2_Nordering_token_1_device_"
    "/job:worker/replica:0/task:0/device:CPU:0}} Collective ops is aborted by: Error reported "
    "from /job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats): "
    "(the program exited 1)"
)  # what worker 0 of a program that saves only on the chief says (TF 2.21, tf-keras)


@pytest.mark.parametrize(
    ("codes", "errors", "signals", "expected"),
    [
        ((1, 0), (COLLECTIVE_ABORTED, None), (None, None), "fail"),  # its peer had finished
        ((1, 0, 0), (COLLECTIVE_ABORTED, None, None), (None,) * 3, "fail"),
        ((1, 1), (COLLECTIVE_ABORTED, DEADLINE), (None, None), "restart"),  # nobody finished
        ((1, None), (COLLECTIVE_ABORTED, None), (None, None), "restart"),  # stopped, not done
        ((1, 0), (NAME_ERROR, None), (None, None), "restart"),  # its own error, not a peer's
        ((1, 0), (COLLECTIVE_ABORTED, None), ("SIGKILL", None), "restart"),  # killed
        ((-9, 0), (None, None), (None, None), "restart"),
    ],
)  # fmt: skip
def test_a_worker_failing_in_a_collective_after_its_peers_finished_is_not_retried(
    codes, errors, signals, expected
):
    """A finished peer ran every collective it would ever run: the worker still in one ran a
    path the others did not (a save only the chief makes), and every restart repeats it."""
    assert GroupEnd.of(codes, errors, (), signals).next_step(0, backoff_limit=3) == expected


def test_the_final_line_of_a_divergence_names_the_workers_and_the_fix(tmp_path):
    attempt = GroupEnd.of((1, 0), (COLLECTIVE_ABORTED, None))
    text = runner._failure(attempt, load_job(None), 0, LocalPaths(tmp_path), Isolation())
    assert text.startswith(
        "worker 0 failed in a collective operation (UnavailableError) after worker 1 had "
        "finished the program (exit 0): the workers ran different collectives"
    ), text
    assert "every worker must run them (each worker saves" in text
    assert text.count("not retried") == 1 and "gave up" not in text, text
    assert "{{function_node" not in text  # the worker's log has TensorFlow's words


def test_a_restart_resumes_only_from_a_checkpoint_that_exists(tmp_path):
    paths = LocalPaths(tmp_path)
    paths.checkpoint_dir.mkdir()
    assert resume_point(paths) == (
        f"restarting from the beginning (no checkpoint in {paths.checkpoint_dir})"
    )
    (paths.checkpoint_dir / "chief").mkdir()
    assert resume_point(paths) == f"resuming from the checkpoint in {paths.checkpoint_dir}"


# --- real TensorFlow processes -------------------------------------------------------------


@pytest.fixture(scope="module")
def mnist_npz(tmp_path_factory) -> Path:
    import numpy as np

    from trainer.synthetic import make_mnist_like

    path = tmp_path_factory.mktemp("data") / "mnist.npz"
    np.savez(path, **make_mnist_like(train=3072, test=512, seed=1))
    return path


def _tflaunch(*args: str) -> list[str]:
    return [sys.executable, "-m", "launcher", "local", *args]


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}/stat").exists() else ""
    return " Z " not in stat  # a zombie is dead, only not yet reaped


CPP_LOG_LINE = re.compile(r"\b[IWEF]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\]")
"""TensorFlow's C++ (absl) log line: `E0000 00:00:1796050260.220975 5641 file.cc:52] ...`."""


@pytest.mark.tf
def test_two_local_workers_train_in_sync_and_the_console_shows_no_tensorflow_noise(
    finished_local_run: LocalRun,
):
    run, workdir, epochs = finished_local_run, finished_local_run.workdir, LOCAL_RUN_EPOCHS
    result = json.loads((workdir / "model" / contract.RESULT_FILE).read_text())
    assert result["workers"] == 2 and result["replicas"] == 2 and result["restarts"] == 0
    assert result["history"]["loss"][-1] < result["history"]["loss"][0]
    # Off a terminal: plain progress lines (each epoch's end at least), not every worker line.
    for epoch in range(1, epochs + 1):
        epoch_end = rf"^tflaunch: mnist: epoch {epoch}/{epochs}, step (\d+)/\1, loss \d"
        assert re.search(epoch_end, run.stdout, re.MULTILINE), run.stdout
    assert "[worker 0] " not in run.stdout and "INFO" not in run.stdout, run.stdout
    assert "succeeded" in run.stdout
    console = run.stdout + run.stderr
    for noise in ("E0000", "W0000", "I0000", "cuInit", "absl::InitializeLog", "Sharding callback"):
        assert noise not in console, console
    assert not CPP_LOG_LINE.search(console), console
    # ... and the full logs keep TensorFlow's own lines.
    full_log = (workdir / "logs" / "worker-1.log").read_text()
    assert f"[worker 1/2] INFO epoch {epochs}/{epochs}" in full_log and CPP_LOG_LINE.search(
        full_log
    )
    eval_batch = f"eval_batch_size={LOCAL_RUN_EVAL_BATCH},"
    assert eval_batch in full_log, "trainer args after -- must reach the trainer"
    assert progress.latest(full_log.splitlines()) is None, "only the chief reports progress"
    chief_log = (workdir / "logs" / "worker-0.log").read_text().splitlines()
    assert_sane_progress(chief_log, epochs=epochs, fit_seconds=result["fit_seconds"])


def assert_sane_progress(log: list[str], epochs: int, fit_seconds: float) -> None:
    """The chief's progress lines parse, never go back, end at the last step with ETA 0,
    and no ETA is wildly off the time training really took."""
    lines = [p for line in log if (p := progress.parse_line(line)) is not None]
    assert lines, "no TFLAUNCH_PROGRESS line in the chief's log"
    positions = [p.position() for p in lines]
    assert positions == sorted(positions), positions
    last = lines[-1]
    assert last.position() == (epochs, last.steps) and last.steps > 0
    assert last.eta_seconds == 0 and last.loss is not None and last.images_per_sec
    etas = [p.eta_seconds for p in lines if p.eta_seconds is not None]
    assert any(eta > 0 for eta in etas), "an ETA before the end"
    assert all(0 <= eta <= 3 * fit_seconds + 5 for eta in etas), (etas, fit_seconds)


@pytest.mark.tf
def test_a_killed_worker_restarts_the_group_from_the_checkpoint(tmp_path, mnist_npz):
    launcher = subprocess.Popen(
        _tflaunch("--workers", "2", "--epochs", "4", "--data", str(mnist_npz),
                  "--workdir", str(tmp_path), "--set", "spec.backoffLimit=2",
                  # Let TensorFlow probe CUDA: on a machine without GPUs, every worker
                  # then logs the C++ line "E0000 ... cuInit: ... UNKNOWN ERROR (303)".
                  "--set", "spec.env.TF_ENABLED_DEVICE_TYPES=CPU,GPU"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=default_env(),
    )  # fmt: skip
    try:
        checkpoints = tmp_path / "checkpoints"
        deadline = time.monotonic() + 180
        while not (checkpoints.exists() and any(checkpoints.rglob("*.index"))):
            assert launcher.poll() is None, "finished before a checkpoint was seen"
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.1)
        workers = _children(launcher.pid)
        assert len(workers) == 2
        os.kill(workers[1], signal.SIGKILL)
        output, _ = launcher.communicate(timeout=240)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, output[-4000:]
    (restart,) = [line for line in output.splitlines() if "restarting all 2 workers" in line]
    # The cause, and nothing TensorFlow's C++ runtime logged (issue 16: it used to read
    # "worker 1 was killed by SIGKILL: (303); restarting ...").
    assert restart.startswith("tflaunch: worker 1 was killed by SIGKILL"), restart
    assert "(303)" not in restart and "cuInit" not in restart, restart
    assert not CPP_LOG_LINE.search(restart), restart
    result = json.loads((tmp_path / "model" / contract.RESULT_FILE).read_text())
    assert result["restarts"] == 1
    assert result["resumed_from_epoch"] >= 1, "the group must resume, not start over"
    # Each epoch says which run of the group trained it: curves.png marks the restart there.
    assert result["history"]["restart"][0] == 0 and result["history"]["restart"][-1] == 1
    assert (tmp_path / "model" / "curves.png").exists()


@pytest.mark.tf
def test_a_configuration_error_is_not_retried(tmp_path):
    """A data file that exists (the launcher's check) but is no npz: the workers' own check
    refuses it (exit 78), and the group is not restarted."""
    data = tmp_path / "mnist.npz"
    data.write_text("not an npz\n")
    run = subprocess.run(
        _tflaunch("--workers", "2", "--global-batch-size", "64",
                  "--data", str(data), "--workdir", str(tmp_path / "run")),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 3, run.stdout[-2000:] + run.stderr[-2000:]
    assert "(configuration error)" in run.stderr
    assert "; not retried: a restart cannot fix it;" in run.stderr
    assert "is not a readable .npz file" in run.stderr, "the failure must say why, not only that"
    assert "restarting" not in run.stdout
    assert len(run.stderr.strip().splitlines()) == 1


@pytest.mark.tf
def test_sigterm_stops_every_worker(tmp_path, mnist_npz):
    launcher = subprocess.Popen(
        _tflaunch("--workers", "2", "--epochs", "50", "--data", str(mnist_npz),
                  "--workdir", str(tmp_path)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(_children(launcher.pid)) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        workers = _children(launcher.pid)
        time.sleep(3)  # let them get into TensorFlow start-up
        launcher.send_signal(signal.SIGTERM)
        launcher.communicate(timeout=60)
    finally:
        launcher.kill()
    assert launcher.returncode == 130
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers), "orphaned worker processes"
