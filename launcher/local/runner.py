"""`tflaunch local`: the job's N workers as processes on this machine.

Same TF_CONFIG builder, same trainer flags and environment as the pods (only loopback
addresses and local paths differ), and the cluster's failure semantics: when one worker
fails, the whole group is stopped and restarted (MWMS cannot go on with a missing peer), up
to spec.backoffLimit times, resuming from the shared checkpoint; a configuration error
(the trainer's EXIT_CONFIG_ERROR) fails at once, as the Job's podFailurePolicy does. A
preemption (EXIT_PREEMPTED: every worker saved at the same step) restarts the group without
using a retry, as the Job's podFailurePolicy ignores it.
No worker process outlives this one, whatever happens (`kill -9` included), and the group
runs in a private network namespace with only loopback where the system allows one
(`launcher.local.isolation`).

Each worker's full output, TensorFlow's C++ log lines included, goes to
`WORKDIR/logs/worker-<i>.log`; the console gets the trainer's own lines (`console`), or
everything with --verbose / TFLAUNCH_LOG_LEVEL=debug.
"""

from __future__ import annotations

import codecs
import contextlib
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, TextIO

from launcher.api.spec import MultiWorkerJob
from launcher.core import contract, reading, tfconfig, workload
from launcher.core.errors import SpecError, WorkersFailed
from launcher.core.program import own_program
from launcher.core.worker_end import GroupEnd, not_retried, program_signal
from launcher.local import workdir_lock
from launcher.local.console import trainer_error
from launcher.local.display import Console, LineConsole
from launcher.local.gpus import CUDA_VISIBLE_DEVICES
from launcher.local.isolation import Isolation, isolated, network_warning, no_network_hint
from launcher.local.paths import LocalPaths, log_files, not_empty, resume_point

LOOPBACK = "127.0.0.1"
POLL_SECONDS = 0.2
FIRST_FAILURE_WINDOW_SECONDS = 5.0
"""After a worker fails, how long the others get to end on their own before they are
stopped: enough for every worker to report the same program error (then it is not
retried), or for a killed worker's wrapper to say which signal it was."""
MAX_PARTIAL_CHARS = 65536
BROKEN_GROUP_GRACE_SECONDS = 2.0
"""How long the others get after SIGTERM once a worker ended without saving: a coordinated
save needs every worker, so theirs can never finish (the last checkpoint is what is kept)."""


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
    gpu_slices: Sequence[str] | None = None,
) -> list[tuple[list[str], dict[str, str]]]:
    """(argv, env) for each worker: the pod's program with loopback addresses.

    `verbose` asks the trainer for TensorFlow's INFO lines too (TFLAUNCH_LOG_LEVEL=debug).
    `gpu_slices`: each worker's CUDA_VISIBLE_DEVICES (`launcher.local.gpus.assign`).
    """
    program_args = list(extra_args)
    if data is not None and not own_program(job.spec):
        program_args = ["--data", os.path.abspath(data), *program_args]
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
    shape = job.spec.tf_config
    cluster = tfconfig.cluster_spec([f"{LOOPBACK}:{port}" for port in ports], shape)
    commands = []
    for index in range(job.spec.workers):
        env = dict(base_env)
        # Every worker, one alone too, gets a TF_CONFIG as in a pod: programs that read it
        # (TensorFlow's tutorials: `json.loads(os.environ["TF_CONFIG"])`) run the same here.
        env[contract.ENV_TF_CONFIG] = tfconfig.tf_config_json(cluster, index, shape)
        if gpu_slices is not None:
            env[CUDA_VISIBLE_DEVICES] = gpu_slices[index]
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
        isolation: Isolation | None = None,
        cwds: Sequence[Path | None] = (),
        success: str = "allWorkers",
    ) -> None:
        self._success = success
        """spec.successPolicy: when the group has succeeded (`reading.codes_succeeded`)."""
        self.processes: list[subprocess.Popen[bytes]] = []
        self._threads: list[threading.Thread] = []
        self.last_errors: list[str | None] = [None] * len(commands)
        self.saved_steps: list[int | None] = [None] * len(commands)
        self.program_signals: list[str | None] = [None] * len(commands)
        self._sent: set[str] = set()
        """The signals tflaunch sent the workers (a program "killed by SIGTERM" after we
        sent SIGTERM was stopped by us, not the cause)."""
        self._grace_seconds = grace_seconds
        self._log_files = log_files
        self._console = console
        self._reported: dict[int, int | None] = {}
        self._finished: list[datetime.datetime | None] = [None] * len(commands)
        """When each worker was first seen exited: the culprit is the first cause."""
        self._ended = threading.Event()
        """Set when a worker's output ended and it exited: the main loop looks at once
        rather than at its next poll (the group's last exit is the command's result)."""
        preexec = (isolation or Isolation()).preexec()
        for index, (argv, env) in enumerate(commands):
            process = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec,
                cwd=cwds[index] if index < len(cwds) else None,
            )  # fmt: skip
            self.processes.append(process)
            assert process.stdout is not None
            thread = threading.Thread(target=self._pump, args=(index, process.stdout), daemon=True)
            thread.start()
            self._threads.append(thread)

    def wait_first_failure(self) -> GroupEnd:
        """Block until all succeed or one fails; then stop the rest."""
        while True:
            codes = [p.poll() for p in self.processes]
            self._report(codes)
            if reading.codes_succeeded(codes, self._success):
                self.stop()  # successPolicy chief: the workers still running are stopped
                break
            if any(code not in (None, 0) for code in codes):
                # The others save at the same step (a preemption), or fail on their own
                # within moments (the same error everywhere; a survivor's timeout, which
                # must not be taken for the cause): let them say so before stopping them.
                if contract.EXIT_PREEMPTED in codes:
                    window = self._grace_seconds
                elif any(c is not None and (c < 0 or c == contract.EXIT_CONFIG_ERROR)
                         for c in codes):  # fmt: skip
                    window = 0.0  # the cause is known already
                else:
                    window = FIRST_FAILURE_WINDOW_SECONDS
                codes = self._wait_for_the_others(window)
                self.stop()
                break
            self._console.tick()
            self._ended.wait(POLL_SECONDS)
            self._ended.clear()
        for thread in self._threads:
            thread.join(timeout=2.0)  # the last lines, and with them the last errors
        final = tuple(self._codes(codes))
        self._report(list(final), stopped=True)
        return self.attempt(final)

    def attempt(self, codes: Sequence[int | None]) -> GroupEnd:
        """How the attempt ended: each worker's exit code (None: stopped by us), last error,
        the signal that killed its program (when tflaunch did not send it), when it ended."""
        return GroupEnd.of(
            codes, self.last_errors, self.saved_steps, self.program_signals, self._finished
        )

    def _wait_for_the_others(self, seconds: float) -> list[int | None]:
        """One worker ended: give the others `seconds` to end on their own (saving at the
        same step, or failing with their own reason) instead of stopping them at once."""
        deadline = time.monotonic() + seconds
        codes = [p.poll() for p in self.processes]
        while any(code is None for code in codes) and time.monotonic() < deadline:
            self._report(codes)
            time.sleep(POLL_SECONDS)
            codes = [p.poll() for p in self.processes]
        return codes

    def _report(self, codes: Sequence[int | None], stopped: bool = False) -> None:
        """Tell the console about each worker that ended (once; None: stopped by us)."""
        for index, code in enumerate(codes):
            if code is not None and self._finished[index] is None:
                self._finished[index] = datetime.datetime.now(datetime.timezone.utc)
            if index not in self._reported and (code is not None or stopped):
                self._reported[index] = code
                self._console.exited(index, code)

    def _codes(self, first_seen: list[int | None]) -> Iterator[int | None]:
        for seen, process in zip(first_seen, self.processes, strict=True):
            # A worker we stopped ourselves is reported as stopped, not as a failure.
            yield seen if seen is not None else (0 if process.returncode == 0 else None)

    def _pump(self, index: int, stream: IO[bytes]) -> None:
        """The worker's output as it comes: into its log file at once (flushed, so that
        `tail -f` follows it), and line by line to the console, each line as a terminal
        would show it (Keras' progress bar redraws one line with \\r and \\b)."""
        log_file = self._log_files[index]
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        partial = ""
        for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
            text = decoder.decode(chunk)
            if not log_file.closed:  # closed once the attempt is over and stop() gave up
                log_file.write(text)
                log_file.flush()
            *lines, partial = (partial + text).split("\n")
            for line in lines:
                self._line(index, line)
            if len(partial) > MAX_PARTIAL_CHARS and "\r" in partial:  # one frame is enough
                partial = partial[partial.rindex("\r") :]
        if partial:
            self._line(index, partial)
        stream.close()
        self.processes[index].wait()
        self._ended.set()

    def _line(self, index: int, raw: str) -> None:
        line = contract.final_frame(raw)
        self._console.line(index, line)
        error = trainer_error(line)
        if error:
            self.last_errors[index] = error
            killed = program_signal(error)
            if killed and killed not in self._sent:
                self.program_signals[index] = killed
        saved = contract.saved_step(line)
        if saved is not None:
            self.saved_steps[index] = saved

    def stop(self) -> None:
        """SIGTERM every worker's process group (a training worker saves, then exits
        EXIT_PREEMPTED), SIGKILL what is left after the grace period, or
        BROKEN_GROUP_GRACE_SECONDS after a worker ended without saving, or at once on a
        second Ctrl-C/SIGTERM (re-raised as KeyboardInterrupt: the run ends)."""
        self._sent.add(signal.SIGTERM.name)
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
        self._sent.add(signal.SIGKILL.name)
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
    network: str = "private",
    gpu_slices: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run the group to success (returning the chief's result) or raise WorkersFailed.

    `gpu_slices`: each worker's CUDA_VISIBLE_DEVICES, from `launcher.local.gpus.assign`
    (None: CPU workers, the environment's CUDA_VISIBLE_DEVICES left as it is).

    `network` "private" runs the group in its own network namespace with only loopback
    (warning once where the system cannot), "host" on this machine's network.

    `console` shows the group (`launcher.local.display`); by default every line the
    trainer logs goes to `write`, prefixed `[worker i]`, and with `verbose` TensorFlow's own
    log lines too. They are always all in the per-worker log files.
    """
    console = console or LineConsole(write, verbose)
    paths = LocalPaths(workdir.resolve())
    lock = contextlib.ExitStack()  # held before anything in the workdir is written
    try:
        paths.workdir.mkdir(parents=True, exist_ok=True)
        lock.enter_context(workdir_lock.held(paths.workdir))
        paths.prepare(job)
    except OSError as error:  # read-only, full, /proc: before any worker starts
        lock.close()
        raise SpecError(
            "--workdir",
            f"cannot write {error.filename or paths.workdir}: {error.strerror or error}; "
            "choose a writable directory with free space",
        ) from None
    except BaseException:
        lock.close()
        raise
    restarts = 0
    preemptions = 0
    with (
        lock,
        _sigterm_as_exception(),
        contextlib.closing(console),
        isolated(network) as isolation,
    ):
        if any(paths.checkpoint_dir.iterdir()):
            console.message(f"tflaunch: resuming from the checkpoint in {paths.checkpoint_dir}")
        warning = network_warning(isolation)
        if warning:
            console.message(warning)
        while True:
            commands = worker_commands(job, paths, free_ports(job.spec.workers), restarts,
                                       data, extra_args, verbose, gpu_slices)  # fmt: skip
            with log_files(paths, job.spec.workers, restarts + preemptions) as files:
                group = _Group(commands, console, files,
                               job.spec.termination_grace_period_seconds, isolation,
                               worker_cwds(job, paths), job.spec.success_policy)  # fmt: skip
                try:
                    attempt = group.wait_first_failure()
                except (KeyboardInterrupt, _Terminated):
                    console.message(_stopping_message(job))
                    group.stop()
                    attempt = group.attempt([p.returncode for p in group.processes])
                    if not attempt.succeeded:
                        raise KeyboardInterrupt from None
                    # Every worker had finished, or finished within the grace period: the
                    # run is a success, whenever the Ctrl-C came.
                finally:
                    group.stop()
            step = attempt.next_step(restarts, job.spec.backoff_limit, job.spec.success_policy)
            if step == "done":
                if own_program(job.spec):  # the program's own output is its result
                    model_dir = str(paths.model_dir) if not_empty(paths.model_dir) else None
                    wrote = any(not_empty(paths.worker_dir(i)) for i in range(job.spec.workers))
                    return {"restarts": restarts, "preemptions": preemptions,
                            "model_dir": model_dir,
                            "workers_dir": str(paths.workers_dir) if wrote else None}  # fmt: skip
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
                raise WorkersFailed(_failure(attempt, job, restarts, paths, isolation))
            restarts += 1
            console.message(
                f"tflaunch: {attempt.describe()}; restarting all {job.spec.workers} workers "
                f"(restart {restarts}/{job.spec.backoff_limit}), {resume_point(paths)}"
            )
            console.restarted(restarts)


def worker_cwds(job: MultiWorkerJob, paths: LocalPaths) -> list[Path | None]:
    """Each worker's working directory: its own under the workdir, as a pod has its own
    filesystem; a spec.command program's is the caller's (its files are named relative to
    it, and tflaunch does not know them)."""
    if job.spec.command:
        return [None] * job.spec.workers
    return [paths.worker_dir(index) for index in range(job.spec.workers)]


def _failure(
    attempt: GroupEnd,
    job: MultiWorkerJob,
    restarts: int,
    paths: LocalPaths,
    isolation: Isolation,
) -> str:
    """The run's one final line: the cause, why it is not retried (said once), the logs."""
    same = attempt.same_program_error
    if same:
        text = (
            f"every worker's program failed with the same error ({same}): a program error, "
            f"not retried; fix it and run again{no_network_hint(same, isolation)}"
        )
    elif why := not_retried(attempt.culprit):
        text = f"{attempt.describe()}; {why}"
    elif attempt.divergence:
        text = f"{attempt.divergence.describe()}; not retried: a restart would repeat it"
    else:
        text = (
            f"{attempt.describe()}; gave up after {restarts} restart(s) "
            f"(spec.backoffLimit={job.spec.backoff_limit})"
            f"{no_network_hint(attempt.describe(), isolation)}"
        )
    return f"{text}; full worker logs in {paths.logs_dir}"


def _stopping_message(job: MultiWorkerJob) -> str:
    grace = job.spec.termination_grace_period_seconds
    if own_program(job.spec):  # whether it saves on SIGTERM is the program's business
        return (
            f"tflaunch: stopping the workers: SIGTERM now (a program that saves on SIGTERM "
            f"saves), SIGKILL to any still running after {grace}s; Ctrl-C again stops them "
            "at once"
        )
    return (
        f"tflaunch: stopping: every worker saves and exits (up to {grace}s); Ctrl-C again "
        "stops them at once"
    )


def describe_preemption(attempt: GroupEnd) -> str:
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
