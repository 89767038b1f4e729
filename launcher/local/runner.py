"""`tflaunch local`: the job's N workers as processes on this machine.

Same TF_CONFIG builder, same trainer flags and environment as the pods (only loopback
addresses and local paths differ), and the cluster's failure semantics: when one worker
fails, the whole group is stopped and restarted (MWMS cannot go on with a missing peer), up
to spec.backoffLimit times, resuming from the shared checkpoint; a configuration error
(the trainer's EXIT_CONFIG_ERROR) fails at once, as the Job's podFailurePolicy does. A
preemption (EXIT_PREEMPTED: every worker saved at the same step) restarts the group without
using a retry, as the Job's podFailurePolicy ignores it.
No worker process outlives this one, whatever happens.

Each worker's full output, TensorFlow's C++ log lines included, goes to
`WORKDIR/logs/worker-<i>.log`; the console gets the trainer's own lines (`console`), or
everything with --verbose / TFLAUNCH_LOG_LEVEL=debug.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, TextIO

from launcher.core import contract, script, tfconfig, workload
from launcher.core.errors import WorkersFailed
from launcher.core.spec import MultiWorkerJob, own_program
from launcher.local.console import trainer_error
from launcher.local.display import Console, LineConsole

LOOPBACK = "127.0.0.1"
POLL_SECONDS = 0.2
BROKEN_GROUP_GRACE_SECONDS = 2.0
"""How long the others get after SIGTERM once a worker ended without saving: a coordinated
save needs every worker, so theirs can never finish (the last checkpoint is what is kept)."""


@dataclasses.dataclass(frozen=True)
class LocalPaths:
    """Where a local run keeps what a pod keeps on its volumes."""

    workdir: Path

    @property
    def checkpoint_dir(self) -> Path:
        return self.workdir / "checkpoints"

    @property
    def model_dir(self) -> Path:
        return self.workdir / "model"

    @property
    def result_file(self) -> Path:
        return self.model_dir / contract.RESULT_FILE

    @property
    def script_dir(self) -> Path:
        """Where spec.script is written (a pod mounts it from a ConfigMap)."""
        return self.workdir / "script"

    @property
    def tensorboard_dir(self) -> Path:
        """The chief's event files (`workload.tensorboard_dir` beside the model)."""
        return self.workdir / "tensorboard"

    @property
    def logs_dir(self) -> Path:
        return self.workdir / "logs"

    def log_file(self, index: int) -> Path:
        """Worker `index`'s full output, every attempt appended."""
        return self.logs_dir / f"worker-{index}.log"


@dataclasses.dataclass(frozen=True)
class Attempt:
    """How one run of the whole group ended."""

    exit_codes: tuple[int | None, ...]
    last_errors: tuple[str | None, ...] = ()
    """Each worker's last ERROR line of the trainer's own (never a TensorFlow C++ line), so
    the failure says why, not only how; for exit 75/78 it is the trainer's one-line reason."""
    saved_steps: tuple[int | None, ...] = ()
    """The step each worker said it saved at before exiting EXIT_PREEMPTED."""

    @property
    def succeeded(self) -> bool:
        return all(code == contract.EXIT_OK for code in self.exit_codes)

    @property
    def config_error(self) -> bool:
        return contract.EXIT_CONFIG_ERROR in self.exit_codes

    @property
    def preempted(self) -> bool:
        """Told to stop and saved: some worker exited EXIT_PREEMPTED and none failed (the
        others saved too, or were stopped by us once the grace period was over)."""
        codes = set(self.exit_codes)
        return contract.EXIT_PREEMPTED in codes and codes <= {0, None, contract.EXIT_PREEMPTED}

    @property
    def saved_step(self) -> int | None:
        """Where the group resumes after a preemption (the chief's word first)."""
        return next((step for step in self.saved_steps if step is not None), None)

    def describe(self) -> str:
        """The cause first (a signal, then a configuration error, then a rendezvous
        timeout, then any other exit), with that worker's own reason; the other failed
        workers (usually survivors that saw a peer die) only by their exit."""
        failed = [i for i, code in enumerate(self.exit_codes) if code not in (0, None)]
        if not failed:
            return "no worker failed"
        cause, *others = sorted(failed, key=lambda i: (_cause_rank(self.exit_codes[i]), i))
        text = f"worker {cause} {_describe_exit(self.exit_codes[cause])}"
        reason = self.last_errors[cause] if cause < len(self.last_errors) else None
        if reason:
            text += f": {reason}"
        if others:
            too = ", ".join(f"worker {i} {_describe_exit(self.exit_codes[i])}" for i in others)
            text += f" ({too} too)"
        return text


def _cause_rank(code: int | None) -> int:
    """How likely an exit is the group's cause rather than a consequence (lower: likelier)."""
    if code is not None and code < 0:
        return 0  # killed by a signal: OOM killer, kill -9, preemption
    return {contract.EXIT_CONFIG_ERROR: 1, contract.EXIT_RENDEZVOUS_TIMEOUT: 2}.get(code or 0, 3)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "was stopped"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    meaning = {
        contract.EXIT_CONFIG_ERROR: " (configuration error)",
        contract.EXIT_RENDEZVOUS_TIMEOUT: " (peers never came)",
        contract.EXIT_PREEMPTED: " (preempted, saved)",
    }.get(code, "")
    return f"exited {code}{meaning}"


def next_step(attempt: Attempt, restarts_so_far: int, backoff_limit: int) -> str:
    """What the group does after an attempt: "done", "resume" (after a preemption: uses no
    retry), "restart" or "fail" (pure policy)."""
    if attempt.succeeded:
        return "done"
    if attempt.preempted:
        return "resume"
    if attempt.config_error or restarts_so_far >= backoff_limit:
        return "fail"
    return "restart"


def free_ports(count: int) -> list[int]:
    """Ports the OS says are free now; fresh ones for every attempt of the group."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((LOOPBACK, 0))
        return [sock.getsockname()[1] for sock in sockets]


def worker_commands(
    job: MultiWorkerJob,
    paths: LocalPaths,
    ports: Sequence[int],
    restarts: int,
    data: str | None,
    extra_args: Sequence[str] = (),
    verbose: bool = False,
) -> list[tuple[list[str], dict[str, str]]]:
    """(argv, env) for each worker: the pod's program with loopback addresses.

    `verbose` asks the trainer for TensorFlow's INFO lines too (TFLAUNCH_LOG_LEVEL=debug).
    """
    program_args = list(extra_args)
    if data is not None and not own_program(job.spec):
        program_args = ["--data", data, *program_args]
    argv = workload.worker_argv(
        job, str(paths.checkpoint_dir), str(paths.model_dir), python=sys.executable,
        script_dir=str(paths.script_dir), extra_args=program_args,
    )  # fmt: skip
    base_env = {
        **os.environ,
        **workload.trainer_env(job),
        "PYTHONUNBUFFERED": "1",
        contract.ENV_RESTARTS: str(restarts),
    }
    if verbose:
        base_env[contract.ENV_LOG_LEVEL] = contract.LOG_LEVEL_DEBUG
    cluster = tfconfig.cluster_spec([f"{LOOPBACK}:{port}" for port in ports])
    commands = []
    for index in range(job.spec.workers):
        env = dict(base_env)
        env.pop(contract.ENV_TF_CONFIG, None)
        if job.spec.workers > 1:  # one worker runs without TF_CONFIG, as on a single device
            env[contract.ENV_TF_CONFIG] = tfconfig.tf_config_json(cluster, index)
        env[contract.ENV_WORKER_INDEX] = str(index)
        commands.append((list(argv), env))
    return commands  # fmt: skip


class _Group:
    """N worker processes, their output logged in full and handed to the console, stopped
    together."""

    def __init__(
        self,
        commands: Sequence[tuple[list[str], dict[str, str]]],
        console: Console,
        log_files: Sequence[TextIO],
        grace_seconds: float,
    ) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self._threads: list[threading.Thread] = []
        self.last_errors: list[str | None] = [None] * len(commands)
        self.saved_steps: list[int | None] = [None] * len(commands)
        self._grace_seconds = grace_seconds
        self._log_files = log_files
        self._console = console
        self._reported: dict[int, int | None] = {}
        for index, (argv, env) in enumerate(commands):
            process = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            self.processes.append(process)
            assert process.stdout is not None
            thread = threading.Thread(target=self._pump, args=(index, process.stdout), daemon=True)
            thread.start()
            self._threads.append(thread)

    def wait_first_failure(self) -> Attempt:
        """Block until all succeed or one fails; then stop the rest."""
        while True:
            codes = [p.poll() for p in self.processes]
            self._report(codes)
            if all(code == 0 for code in codes):
                break
            if any(code not in (None, 0) for code in codes):
                if contract.EXIT_PREEMPTED in codes:
                    codes = self._wait_for_the_others_to_save()
                self.stop()
                break
            self._console.tick()
            time.sleep(POLL_SECONDS)
        for thread in self._threads:
            thread.join(timeout=2.0)  # the last lines, and with them the last errors
        final = tuple(self._codes(codes))
        self._report(list(final), stopped=True)
        return Attempt(final, tuple(self.last_errors), tuple(self.saved_steps))

    def _wait_for_the_others_to_save(self) -> list[int | None]:
        """One worker saved and exited: the others are saving at the same step (or about to
        fail); let them finish within the grace period instead of stopping them mid-save."""
        deadline = time.monotonic() + self._grace_seconds
        codes = [p.poll() for p in self.processes]
        while any(code is None for code in codes) and time.monotonic() < deadline:
            self._report(codes)
            time.sleep(POLL_SECONDS)
            codes = [p.poll() for p in self.processes]
        return codes

    def _report(self, codes: Sequence[int | None], stopped: bool = False) -> None:
        """Tell the console about each worker that ended (once; None: stopped by us)."""
        for index, code in enumerate(codes):
            if index not in self._reported and (code is not None or stopped):
                self._reported[index] = code
                self._console.exited(index, code)

    def _codes(self, first_seen: list[int | None]) -> Iterator[int | None]:
        for seen, process in zip(first_seen, self.processes, strict=True):
            # A worker we stopped ourselves is reported as stopped, not as a failure.
            yield seen if seen is not None else (0 if process.returncode == 0 else None)

    def _pump(self, index: int, stream: IO[bytes]) -> None:
        log_file = self._log_files[index]
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            if not log_file.closed:  # closed once the attempt is over and stop() gave up
                log_file.write(line + "\n")
            self._console.line(index, line)
            error = trainer_error(line)
            if error:
                self.last_errors[index] = error
            saved = contract.saved_step(line)
            if saved is not None:
                self.saved_steps[index] = saved
        stream.close()

    def stop(self) -> None:
        """SIGTERM every worker's process group (a training worker saves, then exits
        EXIT_PREEMPTED), SIGKILL what is left after the grace period, or
        BROKEN_GROUP_GRACE_SECONDS after a worker ended without saving, or at once on a
        second Ctrl-C/SIGTERM (re-raised as KeyboardInterrupt: the run ends)."""
        for process in self.processes:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + self._grace_seconds
        interrupted = False
        try:
            while any(p.poll() is None for p in self.processes) and time.monotonic() < deadline:
                if self._broken():
                    deadline = min(deadline, time.monotonic() + BROKEN_GROUP_GRACE_SECONDS)
                time.sleep(POLL_SECONDS / 4)
        except (KeyboardInterrupt, _Terminated):
            interrupted = True  # asked again while they save: stop them now, then end the run
        for process in self.processes:
            _signal_group(process, signal.SIGKILL)
            process.wait()
        for thread in self._threads:
            thread.join(timeout=2.0)
        if interrupted:
            raise KeyboardInterrupt

    def _broken(self) -> bool:
        """A worker ended without saving (neither done nor preempted-and-saved)."""
        return any(
            p.returncode not in (None, contract.EXIT_OK, contract.EXIT_PREEMPTED)
            for p in self.processes
        )


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)


class _Terminated(Exception):
    """SIGTERM arrived: stop the workers like Ctrl-C does."""


@contextlib.contextmanager
def _sigterm_as_exception() -> Iterator[None]:
    def handler(signum: int, frame: Any) -> None:
        raise _Terminated

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_local(
    job: MultiWorkerJob,
    workdir: Path,
    data: str | None = None,
    extra_args: Sequence[str] = (),
    write: Callable[[str], None] = print,
    verbose: bool = False,
    console: Console | None = None,
) -> dict[str, Any]:
    """Run the group to success (returning the chief's result) or raise WorkersFailed.

    `console` shows the group (`launcher.local.display`); by default every line the
    trainer logs goes to `write`, prefixed `[worker i]`, and with `verbose` TensorFlow's own
    log lines too. They are always all in the per-worker log files.
    """
    console = console or LineConsole(write, verbose)
    paths = LocalPaths(workdir.resolve())
    for directory in (paths.checkpoint_dir, paths.model_dir, paths.logs_dir):
        directory.mkdir(parents=True, exist_ok=True)
    _write_script(job, paths)
    if any(paths.checkpoint_dir.iterdir()):
        console.message(f"tflaunch: resuming from the checkpoint in {paths.checkpoint_dir}")
    restarts = 0
    preemptions = 0
    with _sigterm_as_exception(), contextlib.closing(console):
        while True:
            commands = worker_commands(job, paths, free_ports(job.spec.workers), restarts,
                                       data, extra_args, verbose)  # fmt: skip
            with _log_files(paths, job.spec.workers, restarts + preemptions) as log_files:
                group = _Group(commands, console, log_files,
                               job.spec.termination_grace_period_seconds)  # fmt: skip
                try:
                    attempt = group.wait_first_failure()
                except (KeyboardInterrupt, _Terminated):
                    console.message(
                        f"tflaunch: stopping: every worker saves and exits (up to "
                        f"{job.spec.termination_grace_period_seconds}s); Ctrl-C again stops "
                        "them at once"
                    )
                    group.stop()
                    raise KeyboardInterrupt from None
                finally:
                    group.stop()
            step = next_step(attempt, restarts, job.spec.backoff_limit)
            if step == "done":
                if own_program(job.spec):  # the program's own output is its result
                    return {"restarts": restarts, "preemptions": preemptions,
                            "model_dir": str(paths.model_dir)}  # fmt: skip
                return _result(paths, restarts, preemptions)
            if step == "resume":
                preemptions += 1
                console.message(
                    f"tflaunch: {describe_preemption(attempt)}; restarting all "
                    f"{job.spec.workers} workers (preemption {preemptions}, not a retry: "
                    f"{restarts}/{job.spec.backoff_limit} used)"
                )
                continue
            if step == "fail":
                reason = (
                    "configuration error, not retried"
                    if attempt.config_error
                    else (
                        f"gave up after {restarts} restart(s) "
                        f"(spec.backoffLimit={job.spec.backoff_limit})"
                    )
                )
                raise WorkersFailed(
                    f"{attempt.describe()}; {reason}; full worker logs in {paths.logs_dir}"
                )
            restarts += 1
            console.message(
                f"tflaunch: {attempt.describe()}; restarting all {job.spec.workers} workers "
                f"(restart {restarts}/{job.spec.backoff_limit}), resuming from the checkpoint"
            )
            console.restarted(restarts)


@contextlib.contextmanager
def _log_files(paths: LocalPaths, workers: int, restarts: int) -> Iterator[list[TextIO]]:
    """Each worker's log file, opened for one attempt, which starts with a header line."""
    with contextlib.ExitStack() as stack:
        files: list[TextIO] = []
        for index in range(workers):
            log_file = stack.enter_context(
                paths.log_file(index).open("a", encoding="utf-8", errors="replace")
            )
            log_file.write(f"--- tflaunch: worker {index}, attempt {restarts + 1} ---\n")
            files.append(log_file)
        yield files


def _write_script(job: MultiWorkerJob, paths: LocalPaths) -> None:
    """spec.script's files where the workers run them, with the layout a pod finds in its
    ConfigMap (no file of an earlier run left beside them): the entry file's directory is
    the first on the program's import path, so `import mnist_setup` finds its neighbour."""
    if job.spec.script is None:
        return
    shutil.rmtree(paths.script_dir, ignore_errors=True)
    for rel, text in script.all_files(job.spec.script).items():
        target = paths.script_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def describe_preemption(attempt: Attempt) -> str:
    """ "preempted, every worker saved at step 70, resuming there" (or what is known)."""
    step = attempt.saved_step
    if step is None:
        return "preempted, resuming from the last checkpoint"
    return f"preempted, every worker saved at step {step}; resuming at step {step}"


def _result(paths: LocalPaths, restarts: int, preemptions: int) -> dict[str, Any]:
    try:
        result: dict[str, Any] = json.loads(paths.result_file.read_text())
    except (OSError, ValueError) as error:
        raise WorkersFailed(
            f"workers exited 0 but {paths.result_file} is unreadable: {error}"
        ) from None
    result["restarts"] = restarts
    result["preemptions"] = preemptions
    paths.result_file.write_text(json.dumps(result, indent=2) + "\n")
    return result
