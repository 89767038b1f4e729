"""`python -m trainer.run [OPTIONS] -- CMD ARGS...`: every worker's entrypoint, any program.

The wrapper gives a user's own training program the guarantees the built-in trainer has:
before the program starts, TF_CONFIG is checked (and against the pod's completion index),
the promised GPUs are checked, and every peer must answer within --rendezvous-timeout,
else the worker fails with one line naming what is wrong and the contract's exit code
(78 never retried, 75 retried). Then the program runs as a child with TF_CONFIG untouched
and the documented environment (`launcher.core.contract`, docs/own-training.md); SIGTERM
and SIGINT are forwarded to it, and its exit is mapped to the contract: 0, 78 and 79 pass
through, anything else (a traceback's 1, a signal) becomes 1, which restarts the group, but
a failure whose cause is known (`trainer.known_errors`) becomes 78, with its remedy.
Optionally a stall watchdog that needs no cooperation: no output and no checkpoint written
for --stall-timeout seconds stops the program and exits 1.

TensorFlow is never imported here: the GPU check runs in a short-lived child
(`trainer.devicecheck`) so the wrapper holds neither TensorFlow's memory nor a CUDA context.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from types import FrameType
from typing import NoReturn

from launcher.core import contract, exit_policy
from trainer import generation_file, generations, known_errors, logs, preflight, standby
from trainer.child import ChildProgram
from trainer.errors import ConfigError, TrainerError
from trainer.watchdog import Watchdog, frozen_for

log = logging.getLogger("tflaunch.worker")

MOVED_ON_GRACE_SECONDS = 1.0
"""How long a program whose group moved on gets between SIGTERM and SIGKILL: a peer is gone,
so no save it could start (the trainer's on SIGTERM needs every worker) would finish."""
CHECKPOINT_POLL_SECONDS = 5.0
PASSED_THROUGH = frozenset({contract.EXIT_OK, contract.EXIT_CONFIG_ERROR, contract.EXIT_PREEMPTED})
"""The program's exit codes the wrapper returns as they are; everything else becomes 1."""
FORWARDED = frozenset({signal.SIGTERM, signal.SIGINT})
"""The signals the wrapper passes on to the program (eviction, kubectl delete, Ctrl-C)."""
TERMINATION_LOG = Path(contract.TERMINATION_MESSAGE_PATH)
"""Kubernetes' default terminationMessagePath: what is written there shows in the pod's
status (`tflaunch status`, the operator's failure message), not only in its log."""


class _UsageError(ConfigError):
    """A wrapper flag argparse refused."""


class _WrapperParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"bad worker wrapper flag: {message}; see `{self.prog} --help`")


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = _WrapperParser(
        prog=f"python -m {contract.WRAPPER_MODULE}",
        description=(
            "Run a TensorFlow training program as one worker of a tflaunch group: check "
            "TF_CONFIG, GPUs and peers first, then run CMD with the tflaunch environment.\n"
            "Example: python -m trainer.run --expect-gpus 0 -- python train.py --epochs 3"
        ),
        epilog=(  # the exit-code table's own words, as tflaunch prints them
            f"Exit codes: {contract.EXIT_OK} done; "
            + "; ".join(f"{rule.code} {rule.said} ({rule.why})" for rule in exit_policy.RULES)
            + f"; {contract.EXIT_TRANSIENT} anything else (the group is restarted)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--expect-gpus",
        type=int,
        metavar="N",
        help="fail (78) unless N GPUs are visible; 0 = CPU only, TensorFlow does not "
        "initialize CUDA (default: no check)",
    )
    parser.add_argument(
        "--rendezvous-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait for every peer to be reachable (default: 300)",
    )
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="stop the program and exit 1 when it writes no output and no checkpoint for "
        "this long; 0 = off (default: 0)",
    )
    parser.add_argument(
        "--checkpoint-dir",
        default=env.get(contract.ENV_CHECKPOINT_DIR) or None,
        metavar="DIR",
        help=f"exported as ${contract.ENV_CHECKPOINT_DIR} (default: its current value)",
    )
    parser.add_argument(
        "--model-dir",
        default=env.get(contract.ENV_MODEL_DIR) or None,
        metavar="DIR",
        help=f"exported as ${contract.ENV_MODEL_DIR} (default: its current value)",
    )
    parser.add_argument(
        "--restart-in-place",
        type=int,
        metavar="N",
        help="when a program fails in a way that restarts the group, relaunch every worker's "
        "program here, together, up to generation N (group restarts; $TFLAUNCH_RESTARTS "
        "counts them), then exit 1; peers meet on the TensorFlow port + "
        f"{contract.CONTROL_PORT_OFFSET} (default: off, every failure ends the worker)",
    )
    parser.add_argument(
        "--standby-imports",
        default=env.get(standby.ENV_IMPORTS, standby.DEFAULT_IMPORTS),
        metavar="MODULES",
        help="with --restart-in-place and a Python CMD: a standby interpreter imports these "
        "(comma-separated) while the program trains, and runs the next generation's program "
        f'without their import time; "" = off (default: ${standby.ENV_IMPORTS}, else '
        f"{standby.DEFAULT_IMPORTS})",
    )
    parser.add_argument(
        "--standby-after",
        type=float,
        default=standby.DEFAULT_AFTER_SECONDS,
        metavar="SECONDS",
        help="how long after a program starts its standby starts (default: "
        f"{standby.DEFAULT_AFTER_SECONDS:g})",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    return parser


def parse_args(argv: Sequence[str], env: Mapping[str, str]) -> argparse.Namespace:
    """Parse the wrapper's flags; the command is everything after `--`."""
    args = build_parser(env).parse_args(list(argv))
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise _UsageError(
            f"no program to run; usage: python -m {contract.WRAPPER_MODULE} [OPTIONS] "
            "-- CMD ARGS..."
        )
    if args.expect_gpus is not None and args.expect_gpus < 0:
        raise _UsageError(f"--expect-gpus must be >= 0, got {args.expect_gpus}")
    if args.restart_in_place is not None and args.restart_in_place < 0:
        raise _UsageError(f"--restart-in-place must be >= 0, got {args.restart_in_place}")
    if args.rendezvous_timeout <= 0 or args.stall_timeout < 0:
        raise _UsageError("--rendezvous-timeout must be > 0 and --stall-timeout >= 0")
    if args.standby_after < 0:
        raise _UsageError(f"--standby-after must be >= 0, got {args.standby_after:g}")
    args.command = command
    return args


def program_env(
    env: MutableMapping[str, str], cluster: preflight.WorkerGroup, args: argparse.Namespace
) -> dict[str, str]:
    """The program's environment: ours (TF_CONFIG untouched) plus the tflaunch contract."""
    child = dict(env)
    child.setdefault(contract.ENV_LEGACY_KERAS, "1")  # the user's own choice wins
    child.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if contract.debug_requested(env) else "1")
    if args.expect_gpus == 0:
        child.setdefault(preflight.ENV_ENABLED_DEVICE_TYPES, "CPU")
    child.setdefault("PYTHONUNBUFFERED", "1")  # lines reach the log (and the watchdog) at once
    child.setdefault(contract.ENV_RESTARTS, "0")
    child[contract.ENV_ALIVE_FILE] = os.path.join(
        tempfile.gettempdir(), f"tflaunch-alive-{os.getpid()}"
    )
    child[contract.ENV_WORKER_INDEX_PUBLIC] = str(cluster.index)
    child[contract.ENV_NUM_WORKERS] = str(cluster.num_workers)
    for name, directory in (
        (contract.ENV_CHECKPOINT_DIR, args.checkpoint_dir),
        (contract.ENV_MODEL_DIR, args.model_dir),
    ):
        if directory:
            child[name] = directory
            with contextlib.suppress(OSError):  # the program reports it if it cannot write
                Path(directory).mkdir(parents=True, exist_ok=True)
    return child


def termination_message(text: str) -> None:
    """Leave `text` as the container's termination message (in a pod; a no-op elsewhere)."""
    if TERMINATION_LOG.exists():
        with contextlib.suppress(OSError):
            TERMINATION_LOG.write_text(text[-4000:], encoding="utf-8")


def map_exit(returncode: int) -> int:
    """The contract's exit code for the program's: 0/78/79 pass, all else (signals) is 1."""
    return returncode if returncode in PASSED_THROUGH else contract.EXIT_TRANSIENT


def describe_signal(returncode: int) -> str:
    return signal.Signals(-returncode).name


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        return f"was killed by {signal.Signals(-returncode).name}"
    return f"exited {returncode}"


def check_devices(expect_gpus: int | None, label: str) -> None:
    """The GPU check, in a short-lived child that imports TensorFlow (none when CPU only).

    Raises:
        ConfigError: fewer GPUs are visible (the child logged the details).
    """
    if not expect_gpus:
        return
    code = subprocess.call(
        [sys.executable, "-m", "trainer.devicecheck", str(expect_gpus), label],
        stdin=subprocess.DEVNULL,
    )
    if code == contract.EXIT_CONFIG_ERROR:
        raise ConfigError(f"{label}: the GPU check failed (see the line above); not starting")
    if code != contract.EXIT_OK:
        raise TrainerError(f"{label}: the GPU check crashed (exit {code}); not starting")


def newest_mtime(directory: str | None) -> float:
    """The newest modification time under `directory` (0 when absent or empty)."""
    if not directory:
        return 0.0
    newest = 0.0
    for root, dirs, files in os.walk(directory):
        for name in (*dirs, *files):
            with contextlib.suppress(OSError):
                newest = max(newest, os.stat(os.path.join(root, name)).st_mtime)
    return newest


class _Stopped(Exception):
    """SIGTERM/SIGINT arrived before the program started."""


_running: list[ChildProgram] = []
"""The program once started: from then on SIGTERM and SIGINT are passed on to it."""


def start(
    command: Sequence[str], env: Mapping[str, str], watchdog: Watchdog,
    process: subprocess.Popen[bytes] | None = None,
) -> ChildProgram:  # fmt: skip
    """The program (in `process`, a standby, when given); a SIGTERM or SIGINT from now on
    reaches it (`_on_signal`)."""
    program = ChildProgram(command, env, watchdog, process)
    # Registered before any of its output is passed on: whoever saw it print may signal
    # at once, and that signal is the program's, not one before it started.
    _running.append(program)
    program.pass_output_on()
    return program


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Before the program started, stop the wrapper; after, pass the signal on. One handler
    for both, set before anything starts: a signal that arrives while the program starts
    (it may already print) is never taken for one before it."""
    name = signal.Signals(signum).name
    if not _running:
        raise _Stopped(name)
    log.info("%s received: passing it to the program", name)
    _running[-1].forwarded.add(signum)
    _running[-1].signal(signum)


def supervise(program: ChildProgram, watchdog: Watchdog, stalled: threading.Event,
              checkpoint_dir: str | None, stall_timeout: float,
              group: generations.Group | None = None) -> int | None:  # fmt: skip
    """Wait for the program (`_on_signal` passes signals on); stop it when the watchdog
    fires, or when the group moves on without it (then None)."""
    forwarded = program.forwarded
    if stall_timeout:
        watchdog.arm("the program (no output, no checkpoint written)", stall_timeout)
    alive_file = program.env.get(contract.ENV_ALIVE_FILE, "")
    with contextlib.suppress(OSError):  # an earlier program's (a restart in place)
        os.unlink(alive_file)
    seen_checkpoint = newest_mtime(checkpoint_dir)
    scan_every = min(CHECKPOINT_POLL_SECONDS, stall_timeout / 4)
    next_scan = time.monotonic() + scan_every
    while True:
        try:
            program.process.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            pass
        if group is not None and group.moved_on.is_set():
            with contextlib.suppress(subprocess.TimeoutExpired):
                program.process.wait(timeout=group.settle_seconds())
            if program.process.poll() is not None:
                break  # it ended by itself first: its own exit is what counts
            watchdog.disarm()
            program.stop(MOVED_ON_GRACE_SECONDS)
            program.finish()
            return None
        if stalled.is_set():
            termination_message(f"no output and no checkpoint written for {stall_timeout:g}s")
            program.stop()
            program.finish()
            return contract.EXIT_TRANSIENT
        frozen = frozen_for(alive_file)
        if frozen is not None:  # its own watchdog cannot run: stopped at once, a stall
            said = f"no progress for {frozen:g}s: the program froze (its stall watchdog stopped)"
            log.error("%s; stopping it (exit %d)", said, contract.EXIT_TRANSIENT)
            termination_message(said)
            program.stop(MOVED_ON_GRACE_SECONDS)
            program.finish()
            return contract.EXIT_TRANSIENT
        if stall_timeout and time.monotonic() >= next_scan:
            latest = newest_mtime(checkpoint_dir)
            if latest > seen_checkpoint:
                seen_checkpoint = latest
                watchdog.beat()
            next_scan = time.monotonic() + scan_every
    watchdog.disarm()
    code = program.finish()
    mapped = map_exit(code)
    if code == contract.EXIT_OK:
        log.info("the program finished")
    elif code == contract.EXIT_PREEMPTED:
        log.info("the program was preempted and saved (exit %d)", code)
        # Where status, wait and the operator read the step the group resumes at.
        termination_message(program.saved_line or f"preempted and saved (exit {code})")
    elif code < 0 and -code in forwarded:  # asked to stop, and stopped: not a failure
        log.info("the program stopped on %s, as asked (exit %d)", describe_signal(code), mapped)
        termination_message(f"the program stopped on {describe_signal(code)}, as asked")
    else:
        # What follows (a restart, or not) is the launcher's to say: it knows the other
        # workers and the retries left.
        message = failure_message(program, code)
        known = known_errors.explain(program.reason, program.env) if code > 0 else None
        if known is not None:  # it would fail so again after a restart: not retried
            message = f"{message}: {known.words}"
            mapped = contract.EXIT_CONFIG_ERROR
        log.error("%s", message)
        termination_message(message)
    return mapped


def failure_message(program: ChildProgram, code: int) -> str:
    """Why the program failed, with how it ended."""
    reason = program.reason
    how = f"the program {describe_exit(code)}"
    return f"{reason} ({how})" if reason else how


def run(argv: Sequence[str], env: MutableMapping[str, str]) -> int:
    """The wrapper without error handling: preflight, then the program."""
    args = parse_args(argv, env)
    cluster = preflight.parse_tf_config(env.get(contract.ENV_TF_CONFIG))
    logs.configure(cluster.label, contract.debug_requested(env))
    preflight.check_worker_index(cluster, env.get(contract.ENV_WORKER_INDEX))
    check_devices(args.expect_gpus, cluster.label)
    preflight.check_writable(args.checkpoint_dir, cluster.label)
    preflight.check_writable(args.model_dir, cluster.label, "model directory")
    if args.restart_in_place is not None and cluster.address is not None:
        return run_in_place(args, cluster, env)
    preflight.rendezvous(cluster, args.rendezvous_timeout)
    child_env = program_env(env, cluster, args)
    log.info("starting %s", " ".join(args.command))
    stalled = threading.Event()
    watchdog = Watchdog(exit_fn=lambda code: stalled.set())
    try:
        program = start(args.command, child_env, watchdog)
        code = supervise(program, watchdog, stalled, args.checkpoint_dir, args.stall_timeout)
        assert code is not None  # None only when a group can move on
        return code
    finally:
        watchdog.stop()


def first_generation(env: Mapping[str, str]) -> int:
    """The group restarts before this wrapper started ($TFLAUNCH_RESTARTS, the operator's)."""
    raw = env.get(contract.ENV_RESTARTS, "0") or "0"
    if not raw.isdigit():
        raise ConfigError(f"${contract.ENV_RESTARTS} must be an integer >= 0, got {raw!r}")
    return int(raw)


SPENT_STOPPED_DELAY_SECONDS = 3.0
"""Once the budget is spent, how long a worker stopped with the group waits before its exit
1, which the Job's backoffLimit would count and replace: the failed worker's exit 76 fails
the Job first (the kubelet reports an exit within about a second)."""


def run_in_place(
    args: argparse.Namespace, cluster: preflight.WorkerGroup, env: MutableMapping[str, str]
) -> int:
    """The program, relaunched here at every generation the group moves to, behind the
    barrier (`trainer.generations`), until it ends in a way that ends the worker or the
    budget (--restart-in-place) is spent."""
    # A plain Job's recreated pods: no peer stayed to tell them the group's generation.
    stored = generation_file.Keeper(
        args.checkpoint_dir, cluster.index, env.get(contract.ENV_JOB_UID, "")
    )
    group = generations.Group(cluster, max(first_generation(env), stored.generation))
    generation = first = group.me.generation
    stored.say_last_restart()
    code = contract.EXIT_TRANSIENT
    warm = standby.Standby(args.command, args.standby_imports, args.standby_after)
    try:
        while True:
            started = time.monotonic()
            try:
                generation = group.barrier(generation, args.rendezvous_timeout)
            except generations.PeerFinished as finished:  # its pod has ended for good
                # Ends as without restart in place: the termination message keeps the
                # program's failure, read by the operator and `wait` as the divergence.
                log.error("%s finished (exit 0): no restart can include it", finished)
                return code
            waited = time.monotonic() - started
            log.info("generation %d: every peer is here after %.1fs", generation, waited)
            repeated = group.repeated()
            if repeated:
                # Not retried by the Job either: the same program fails the same way.
                log.error("every worker failed with %r: not restarted", repeated)
                termination_message(f"every worker failed alike, a restart repeats it: {repeated}")
                code = contract.EXIT_CONFIG_ERROR
                return code
            failures = []
            if generation > first:  # read by launcher.core.in_place; failures or none (a
                # wrapper killed with its program reported nothing)
                failures = group.failures()
                print(contract.restart_line(generation, failures), flush=True)
            stored.entered(generation, failures)
            final, failed, exited = run_generation(args, cluster, env, group, generation, warm)
            if final is not None:
                code = final
                if generation > first:
                    log.info(
                        "restarts in place: %d (generation %d)", generation - first, generation
                    )
                return code
            generation = group.leave(failed, exited)
            if generation > args.restart_in_place:
                # The worker whose program failed ends the Job (exit 76: FailJob), with its
                # error; one stopped with the group exits 1, never taken for the cause.
                spent = f"the group restarted {generation - 1} times (spec.backoffLimit)"
                code = contract.EXIT_RESTARTS_SPENT if failed else contract.EXIT_TRANSIENT
                log.error("%s; the budget is spent: exiting %d", spent, code)
                termination_message(f"{failed}; {spent}" if failed else f"stopped: {spent}")
                if not failed:  # the Job controller sees the FailJob exit first: no new pod
                    time.sleep(SPENT_STOPPED_DELAY_SECONDS)
                return code
            log.warning("restarting in place at generation %d", generation)
    finally:
        warm.close()
        group.end(code)


def run_generation(
    args: argparse.Namespace, cluster: preflight.WorkerGroup, env: MutableMapping[str, str],
    group: generations.Group, generation: int, warm: standby.Standby,
) -> tuple[int | None, str, bool]:  # fmt: skip
    """One generation's program: (the worker's exit code, "", False) when the worker ends,
    else (None, the program's error line, whether it exited with an error code rather than
    on a signal); the line is "" when the program was stopped because the group moved on."""
    child_env = program_env(env, cluster, args)
    child_env[contract.ENV_RESTARTS] = str(generation)
    termination_message("")  # the previous generation's failure is not this one's end
    stalled = threading.Event()
    watchdog = Watchdog(exit_fn=lambda code: stalled.set())
    try:
        group.begin(generation)
        process = warm.take(child_env)
        said = f" (in the standby: {args.standby_imports} imported)" if process else ""
        log.info("starting %s%s", " ".join(args.command), said)
        program = start(args.command, child_env, watchdog, process)
        warm.schedule(child_env)
        mapped = supervise(
            program, watchdog, stalled, args.checkpoint_dir, args.stall_timeout, group
        )
    finally:
        watchdog.stop()
        # From here a SIGTERM or SIGINT stops the wrapper (`_on_signal`): checked after, so
        # one that reached the program as it ended is not lost.
        _running.clear()
    if mapped is None:
        return None, "", False
    if program.forwarded or mapped != contract.EXIT_TRANSIENT:
        return mapped, "", False  # done, told to stop, or an exit no restart can fix
    if stalled.is_set():
        return None, f"no output and no checkpoint written for {args.stall_timeout:g}s", False
    code = program.process.returncode
    return None, failure_message(program, code), code > 0


def main(argv: Sequence[str] | None = None) -> int:
    """Map every failure of the wrapper itself to one ERROR line and the contract's code."""

    _running.clear()
    # As a container's PID 1, a signal without a handler would be ignored.
    for sig in FORWARDED:
        signal.signal(sig, _on_signal)
    logs.configure("worker ?", contract.debug_requested(os.environ))
    try:
        return run(sys.argv[1:] if argv is None else argv, os.environ)
    except TrainerError as e:
        log.error("%s", e)
        termination_message(str(e))
        return e.exit_code
    except _Stopped as e:  # stopped with the group (or the pod deleted): not a failure
        log.info("%s before the program started; exiting %d", e, contract.EXIT_TRANSIENT)
        return contract.EXIT_TRANSIENT


if __name__ == "__main__":
    sys.exit(main())
