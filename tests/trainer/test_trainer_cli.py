"""`python -m trainer` as a process: every configuration problem is one clear message
and the right exit code, before any heavy work (most of these never import TensorFlow).
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from launcher.core import contract
from trainer.errors import TrainerError
from trainer.synthetic import make_mnist_like

from .conftest import Spawn, Worker, free_ports, tf_config

pytestmark = pytest.mark.tf

FAST = [
    "--epochs",
    "1",
    "--global-batch-size",
    "64",
    "--max-train-examples",
    "256",
    "--max-test-examples",
    "128",
]


def error_lines(stderr: str) -> list[str]:
    """The trainer's own ERROR lines (not TensorFlow's C++ "E0000 ... ERROR (303)")."""
    return [line for line in stderr.splitlines() if re.search(r"\[worker [^]]+\] ERROR ", line)]


def assert_config_error(worker: object, *phrases: str) -> str:
    code = worker.wait(120)  # only a guard against a hang  # type: ignore[attr-defined]
    stderr: str = worker.stderr  # type: ignore[attr-defined]
    assert code == contract.EXIT_CONFIG_ERROR, stderr
    errors = error_lines(stderr)
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr
    for phrase in phrases:
        assert phrase in errors[0], errors[0]
    return errors[0]


@pytest.mark.parametrize(
    ("raw", "phrase"),
    [
        ("{oops", "TF_CONFIG is not valid JSON"),
        (
            json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}),
            "task.index 3 is out of range",
        ),
        (
            json.dumps(
                {"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}
            ),
            "'a:1' twice",
        ),
        (
            json.dumps({"cluster": {}, "task": {"type": "worker", "index": 0}}),
            "cluster.worker is missing",
        ),
    ],
)
def test_bad_tf_config_exits_with_a_config_error_naming_the_field(
    spawn: Spawn, mnist_npz: Path, raw: str, phrase: str
) -> None:
    assert_config_error(spawn(["--data", str(mnist_npz), *FAST], tf_config=raw), phrase)


@pytest.mark.parametrize(
    ("argv", "phrase"),
    [
        (["--epochz", "3"], "unrecognized arguments: --epochz 3"),
        (["--epochs", "0"], "argument --epochs: '0' is not a positive integer"),
    ],
)
def test_a_bad_flag_exits_with_a_config_error_instead_of_a_retryable_2(
    spawn: Spawn, mnist_npz: Path, argv: list[str], phrase: str
) -> None:
    """Flags come from spec.trainer.extraArgs: a retry with the same flags cannot help."""
    worker = spawn(["--data", str(mnist_npz), *FAST, *argv])
    assert_config_error(worker, phrase, "spec.trainer.extraArgs")
    assert "usage:" not in worker.stderr
    assert "tensorflow" not in worker.stderr.lower()  # refused before TensorFlow loads


def test_data_path_from_the_environment_is_checked_too(spawn: Spawn, tmp_path: Path) -> None:
    worker = spawn(FAST, env={contract.ENV_DATA: str(tmp_path / "absent.npz")})
    assert_config_error(worker, "absent.npz does not exist")


def test_malformed_npz_names_the_array(spawn: Spawn, tmp_path: Path) -> None:
    arrays = make_mnist_like(64, 32)
    arrays["x_train"] = arrays["x_train"].reshape(64, 784)
    np.savez(tmp_path / "bad.npz", **arrays)
    assert_config_error(
        spawn(["--data", str(tmp_path / "bad.npz"), *FAST]), "x_train has shape (64, 784)"
    )


@dataclasses.dataclass
class Failing:
    workers: dict[str, Worker]
    absent_peer: str
    """The second worker in the "no peer" worker's TF_CONFIG: nobody listens there."""


@pytest.fixture(scope="module")
def failing_after_tensorflow_loads(spawn_for_module: Spawn, mnist_npz: Path) -> Failing:
    """The configuration errors found only once TensorFlow is imported (Keras' download,
    the devices and the replicas they make, the peers), started all at once: each process
    pays TensorFlow's import (seconds), and they share nothing. Each test below waits for
    its own."""
    data = ["--data", str(mnist_npz), *FAST]
    pair = [f"127.0.0.1:{port}" for port in free_ports(2)]
    alone = [f"127.0.0.1:{port}" for port in free_ports(2)]
    workers = {
        # Without --data the trainer falls back to the shipped subset; a named file that is
        # not there is the configuration error.
        "missing data": spawn_for_module(["--data", "/nonexistent/mnist.npz", *FAST]),
        "indivisible": spawn_for_module(
            [*data, "--global-batch-size", "65"], tf_config=tf_config(pair, 0)
        ),
        "no gpu": spawn_for_module([*data, "--expect-gpus", "1"]),
        "no peer": spawn_for_module(
            [*data, "--rendezvous-timeout", "3"], tf_config=tf_config(alone, 0)
        ),
    }
    return Failing(workers, absent_peer=alone[1])


def test_missing_data_names_both_ways_to_provide_it(
    failing_after_tensorflow_loads: Failing,
) -> None:
    line = assert_config_error(
        failing_after_tensorflow_loads.workers["missing data"],
        "--data",
        "TFLAUNCH_DATA",
        "/opt/tflaunch/mnist.npz",
        "storage.googleapis.com",
    )
    assert "/nonexistent/mnist.npz does not exist" in line


def test_indivisible_global_batch_is_a_config_error(
    failing_after_tensorflow_loads: Failing,
) -> None:
    worker = failing_after_tensorflow_loads.workers["indivisible"]
    assert_config_error(worker, "not divisible by the 2 replicas", "64 or 66")


def test_expected_gpus_not_visible_is_a_config_error_with_the_checklist(
    failing_after_tensorflow_loads: Failing,
) -> None:
    assert_config_error(
        failing_after_tensorflow_loads.workers["no gpu"],
        "expected 1 GPU(s) but TensorFlow sees 0",
        "nvidia.com/gpu",
        "nvidia-container-toolkit",
        "driver",
    )


def test_a_peer_that_never_comes_times_out_naming_it(
    failing_after_tensorflow_loads: Failing,
) -> None:
    worker = failing_after_tensorflow_loads.workers["no peer"]
    code = worker.wait(120)
    assert code == contract.EXIT_RENDEZVOUS_TIMEOUT, worker.stderr
    errors = error_lines(worker.stderr)
    peer = failing_after_tensorflow_loads.absent_peer
    # The exit code and "within 3s" show the bound held; wait(120) only guards against a
    # hang (no wall-clock assertion: CI's 2 cores are busy).
    assert len(errors) == 1 and peer in errors[0] and "within 3s" in errors[0]


@pytest.fixture(scope="module")
def single_worker_runs(
    spawn_for_module: Spawn, mnist_npz: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Worker, Path]]:
    """Two finished single-worker trainings, as a CPU-only pod runs them (--expect-gpus 0)
    with a wrong TF_USE_LEGACY_KERAS and a restart count: one at the default log level,
    one at debug level. Several tests read them (each TensorFlow start costs seconds);
    they differ only in the log level, so what one shows and the other hides is the
    level's doing. Both run at once: nothing they check depends on timing."""
    runs: dict[str, tuple[Worker, Path]] = {}
    for level in ("default", "debug"):
        model_dir = tmp_path_factory.mktemp(level) / "m"
        env = {contract.ENV_LEGACY_KERAS: "0", contract.ENV_RESTARTS: "2"}
        if level == "debug":
            env[contract.ENV_LOG_LEVEL] = "debug"
        flags = ["--model-dir", str(model_dir), "--expect-gpus", "0"]
        runs[level] = (
            spawn_for_module(["--data", str(mnist_npz), *FAST, *flags], env=env),
            model_dir,
        )
    for worker, _ in runs.values():
        assert worker.wait(180) == contract.EXIT_OK, worker.stderr
    return runs


def test_a_single_worker_trains_and_overrides_a_wrong_legacy_keras_setting(
    single_worker_runs: dict[str, tuple[Worker, Path]],
) -> None:
    worker, model_dir = single_worker_runs["default"]
    assert "TF_USE_LEGACY_KERAS was '0'; overriding" in worker.stderr
    assert "running single-worker" in worker.stderr
    result = worker.result()
    assert result["workers"] == 1 and result["restarts"] == 2
    assert json.loads((model_dir / contract.RESULT_FILE).read_text()) == result


def test_the_logged_evaluation_time_is_the_evaluate_phase(
    single_worker_runs: dict[str, tuple[Worker, Path]],
) -> None:
    """The last epoch's test evaluation is the final one; the log line counts every
    evaluation, as result.json's `evaluate` phase does (it said "evaluated in 0.0s")."""
    worker, _ = single_worker_runs["default"]
    match = re.search(r"test set evaluated in ([0-9.]+)s in all", worker.stderr)
    assert match, worker.stderr
    phases = worker.result()["phases"]
    assert isinstance(phases, dict)
    # one decimal in the log, three in result.json: equal up to the log's rounding
    assert abs(float(match.group(1)) - phases["evaluate"]) <= 0.051


def test_a_cpu_only_worker_never_probes_cuda(
    single_worker_runs: dict[str, tuple[Worker, Path]],
) -> None:
    """gpusPerWorker 0 -> --expect-gpus 0: no "E0000 ... failed call to cuInit" line."""
    worker, _ = single_worker_runs["default"]
    assert "sees 1 CPU and 0 GPU device(s)" in worker.stderr
    assert "cuInit" not in worker.stderr and "E0000" not in worker.stderr, worker.stderr


@pytest.mark.parametrize(("level", "shown"), [("default", False), ("debug", True)])
def test_tensorflows_python_info_lines_show_only_at_debug_level(
    single_worker_runs: dict[str, tuple[Worker, Path]], level: str, shown: bool
) -> None:
    """ "INFO Sharding callback duration: 16 microseconds" after every epoch is noise."""
    worker, _ = single_worker_runs[level]
    assert ("Sharding callback duration" in worker.stderr) is shown, worker.stderr


def test_with_no_data_given_keras_loader_runs_beside_the_background_import(
    spawn: Spawn, tmp_path: Path
) -> None:
    """No --data, no $TFLAUNCH_DATA, an empty Keras cache: the trainer asks Keras' loader
    while its background thread is still importing TensorFlow. Importing tf_keras first
    from the main thread deadlocked with that import, and Python broke the tie with a
    half-initialized module: "No module named 'tensorflow.compat'", exit 1. Offline the
    loader fails and the shipped subset is used; online it downloads MNIST. Either way
    the worker trains."""
    env = {"KERAS_HOME": str(tmp_path / "keras")}
    worker = spawn([*FAST, "--model-dir", str(tmp_path / "m"), "--expect-gpus", "0"], env=env)
    assert worker.wait(180) == contract.EXIT_OK, worker.stderr
    assert "Traceback" not in worker.stderr, worker.stderr
    assert "trying Keras' cache" in worker.stderr
    assert worker.result()["dataset"] in (contract.DATASET_MNIST, contract.DATASET_MNIST_SUBSET)


def test_an_unexpected_failure_names_the_exception_in_its_one_error_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from trainer import main

    def broken(*args: object) -> int:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(main, "program", broken)
    monkeypatch.setattr(main.logs, "configure", lambda *args, **kwargs: None)
    assert main.main(["--epochs", "1"]) == contract.EXIT_TRANSIENT
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "RuntimeError: disk on fire" in record.getMessage()


class _Preempted(TrainerError):
    exit_code = contract.EXIT_PREEMPTED


@pytest.mark.parametrize(
    ("failure", "code"),
    [(_Preempted("preempted: every worker saved"), contract.EXIT_PREEMPTED),
     (RuntimeError("disk on fire"), contract.EXIT_TRANSIENT)],
)  # fmt: skip
def test_a_failed_runs_frames_outlive_main_so_freeing_tf_data_cannot_delay_the_exit(
    monkeypatch: pytest.MonkeyPatch, failure: Exception, code: int
) -> None:
    """The frames of a failed fit hold its tf.data iterators, whose destructor can block for
    seconds; `python -m trainer` os._exits right after main() returns, before they are freed
    (a preempted chief that had saved once sat 47 s in ~IteratorResource)."""
    from trainer import main

    freed: list[str] = []

    class Iterator:  # stands in for fit's tf.data iterator: only the failed frame holds it
        def __del__(self) -> None:
            freed.append("iterator")

    def fails(*args: object) -> int:
        iterator = Iterator()  # noqa: F841
        raise failure

    monkeypatch.setattr(main, "program", fails)
    monkeypatch.setattr(main.logs, "configure", lambda *args, **kwargs: None)
    monkeypatch.setattr(main, "_failure", [])
    assert main.main(["--epochs", "1"]) == code
    assert freed == [], "the failed run's frames were freed before the process could exit"


def test_tensorflows_import_starts_before_the_data_is_read_and_after_the_fast_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The import (seconds) overlaps reading the data; a bad TF_CONFIG is still refused
    before TensorFlow starts loading."""
    from trainer import main

    calls: list[str] = []

    class Stop(Exception):
        pass

    def load_mnist(path: object) -> None:
        calls.append("data")
        raise Stop

    def pin(threads: object, cluster: object) -> None:
        calls.append("pin")  # threads inherit the CPUs of the thread that starts them

    monkeypatch.setattr(main.logs, "configure", lambda *args, **kwargs: None)
    monkeypatch.setattr(main.preflight, "pin_to_cpu_share", pin)
    monkeypatch.setattr(main, "import_tensorflow_meanwhile", lambda: calls.append("import"))
    monkeypatch.setattr(main.data, "load_mnist", load_mnist)
    config = main.parse_args(["--epochs", "1"], env={})
    monkeypatch.delenv(contract.ENV_TF_CONFIG, raising=False)
    monkeypatch.delenv(contract.ENV_WORKER_INDEX, raising=False)
    with pytest.raises(Stop):
        main.program(config, None)
    assert calls == ["pin", "import", "data"]

    calls.clear()
    monkeypatch.setenv(contract.ENV_TF_CONFIG, "{not json")
    with pytest.raises(main.ConfigError):
        main.program(config, None)
    assert calls == []


@pytest.mark.tf
def test_the_chief_starts_drawing_curves_before_the_export_and_waits_for_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mnist_npz: Path
) -> None:
    from trainer import main, train
    from trainer.curves_process import CurvesProcess

    events: list[str] = []
    start, export = CurvesProcess.start, train.export_model

    def started(self: Any, result: dict[str, object]) -> None:
        events.append("curves")
        start(self, result)

    def exported(*args: Any) -> None:
        events.append("export")
        export(*args)

    monkeypatch.setattr(CurvesProcess, "start", started)
    monkeypatch.setattr(train, "export_model", exported)
    # In a session whose earlier tests started TensorFlow, its thread pools are fixed.
    monkeypatch.setattr(train, "configure_threads", lambda threads: None)
    monkeypatch.setattr(main.logs, "configure", lambda *args, **kwargs: None)
    monkeypatch.delenv(contract.ENV_TF_CONFIG, raising=False)
    monkeypatch.delenv(contract.ENV_WORKER_INDEX, raising=False)
    model_dir = tmp_path / "model"
    flags = ["--epochs", "1", "--global-batch-size", "32", "--data", str(mnist_npz)]
    flags += ["--model-dir", str(model_dir), "--checkpoint-dir", str(tmp_path / "ckpt")]
    assert main.program(main.parse_args(flags, env={}), None) == contract.EXIT_OK
    assert events == ["curves", "export"]
    assert (model_dir / "curves.png").stat().st_size > 10_000
    assert (model_dir / contract.RESULT_FILE).exists()


def test_python_m_trainer_collects_garbage_rarely() -> None:
    """TensorFlow's import and the tracing create millions of long-lived objects; at Python's
    default thresholds the collector rescans them ~740 times a run (trainer/__main__.py)."""
    from trainer.__main__ import GC_THRESHOLDS

    probe = (
        "import gc, runpy, sys\n"
        "sys.argv = ['trainer', '--epochz']\n"
        "try:\n"
        "    runpy.run_module('trainer', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(gc.get_threshold())\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == str(GC_THRESHOLDS), run.stderr
