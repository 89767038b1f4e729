"""The group restart in place (`python -m trainer.run --restart-in-place N`) with real
processes: wrappers on this machine, tiny Python programs, no TensorFlow.

Each program appends "<generation>" to its worker's runs file when it starts, so what ran,
and at which generation, is read back from the files.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from launcher.core import contract, in_place
from launcher.local.runner import free_ports

REPO = Path(__file__).resolve().parents[2]
WRAPPER = [sys.executable, "-m", contract.WRAPPER_MODULE]
TIMEOUT = 60

PRELOADED = "colorsys"
"""What the standbys import here: small, and not imported by Python's own start."""

PROGRAM = """
import os, signal, sys, time
worker, generation = os.environ["TFLAUNCH_WORKER_INDEX"], os.environ["TFLAUNCH_RESTARTS"]
with open(os.path.join({runs!r}, worker), "a") as f:
    f.write(generation + "\\n")
print(f"worker {{worker}} at generation {{generation}}", flush=True)
{body}
"""
"""`body` sees `worker` and `generation` (strings)."""


def free_control_ports(count: int) -> list[int]:
    """TensorFlow ports whose neighbour (the control port) is free too."""
    found: list[int] = []
    while len(found) < count:
        for port in free_ports(4):
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port + contract.CONTROL_PORT_OFFSET))
                except OSError:
                    continue
            if port not in found and port + 1 not in found and port - 1 not in found:
                found.append(port)
    return found[:count]


def _env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "TFLAUNCH_"))}
    env.pop(contract.ENV_WORKER_INDEX, None)
    env["PYTHONPATH"] = str(REPO)
    return {**env, **extra}


class Group:
    """N wrappers with `--restart-in-place`, each running `body` (per worker)."""

    def __init__(
        self, tmp_path: Path, bodies: Sequence[str], budget: int = 3,
        env: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.runs = tmp_path / "runs"
        self.runs.mkdir()
        self.budget = budget
        self.env = dict(env or {})
        """More of the wrappers' environment (read at each `start`)."""
        self.bodies = list(bodies)
        ports = free_control_ports(len(bodies))
        self.addresses = [f"127.0.0.1:{port}" for port in ports]
        self.processes = [self.start(i) for i in range(len(bodies))]
        self.out: dict[int, str] = {}

    def start(self, index: int) -> subprocess.Popen[str]:
        tf_config = {
            "cluster": {"worker": self.addresses},
            "task": {"type": "worker", "index": index},
        }
        program = PROGRAM.format(runs=str(self.runs), body=self.bodies[index])
        return subprocess.Popen(
            [*WRAPPER, "--restart-in-place", str(self.budget), "--rendezvous-timeout", "30",
             # Every generation after the first runs in a standby (trainer.standby).
             "--standby-after", "0", "--standby-imports", PRELOADED,
             "--", sys.executable, "-c", program],
            env=_env({contract.ENV_TF_CONFIG: json.dumps(tf_config), **self.env}),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def generations(self, index: int) -> list[int]:
        runs = self.runs / str(index)
        return [int(line) for line in runs.read_text().split()] if runs.exists() else []

    def finish(self, index: int) -> tuple[int, str]:
        self.out[index], err = self.processes[index].communicate(timeout=TIMEOUT)
        return self.processes[index].returncode, err

    def wait_for_run(self, index: int, generation: int) -> None:
        deadline = time.monotonic() + TIMEOUT
        while generation not in self.generations(index):
            assert time.monotonic() < deadline, f"worker {index} never ran generation {generation}"
            time.sleep(0.05)

    def kill_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.communicate()


@pytest.fixture
def groups() -> list[Group]:
    made: list[Group] = []
    yield made
    for group in made:
        group.kill_all()


def together(runs: Path, indent: str = "") -> str:
    """Program lines that return once both workers' programs reached them, as a bug at one
    line of the program is reached by every worker at once."""
    where = repr(str(runs))
    return (
        f"{indent}open(os.path.join({where}, 'ready-' + worker), 'w').close()\n"
        f"{indent}while len([f for f in os.listdir({where}) if f.startswith('ready-')]) < 2:\n"
        f"{indent}    time.sleep(0.01)\n"
    )


HANG_UNTIL_RESTARTED = "if generation == '0':\n    time.sleep(120)\n"
"""A survivor's program at generation 0: stuck in a collective with a dead peer."""


def test_a_killed_program_restarts_every_workers_program_at_the_next_generation(
    tmp_path: Path, groups: list[Group]
) -> None:
    crash = "if generation == '0':\n    time.sleep(0.5); os.kill(os.getpid(), signal.SIGKILL)\n"
    group = Group(tmp_path, [HANG_UNTIL_RESTARTED, crash])
    groups.append(group)
    for i in range(2):
        code, err = group.finish(i)
        assert code == contract.EXIT_OK, err
        assert group.generations(i) == [0, 1]
    assert "restarting in place at generation 1" in err
    assert "INFO restarts in place: 1 (generation 1)" in err


def test_a_restarted_program_runs_in_a_standby_that_imported_before_the_failure(
    tmp_path: Path, groups: list[Group]
) -> None:
    seen = tmp_path / "preloaded"
    preloaded = f"str({PRELOADED!r} in sys.modules)"
    report = f"open(f'{seen}-{{worker}}-{{generation}}', 'w').write({preloaded})\n"
    crash = "if generation == '0':\n    time.sleep(1); os.kill(os.getpid(), signal.SIGKILL)\n"
    group = Group(tmp_path, [report + HANG_UNTIL_RESTARTED, report + crash])
    groups.append(group)
    for i in range(2):
        code, err = group.finish(i)
        assert code == contract.EXIT_OK, err
        assert group.generations(i) == [0, 1]
        # Generation 0 started cold; 1 in the standby started while 0 ran.
        assert Path(f"{seen}-{i}-0").read_text() == "False"
        assert Path(f"{seen}-{i}-1").read_text() == "True"
        assert f"(in the standby: {PRELOADED} imported)" in err


def test_every_wrapper_names_the_restart_and_the_program_that_failed_in_one_line(
    tmp_path: Path, groups: list[Group]
) -> None:
    """The line status, wait and the operator read (`launcher.core.in_place`)."""
    crash = "if generation == '0':\n    time.sleep(0.5); os.kill(os.getpid(), signal.SIGKILL)\n"
    group = Group(tmp_path, [HANG_UNTIL_RESTARTED, crash])
    groups.append(group)
    for i in range(2):
        code, err = group.finish(i)
        assert code == contract.EXIT_OK, err
        found = in_place.restarts(group.out[i].splitlines())
        assert [r.generation for r in found] == [1]
        assert found[0].describe() == ("worker 1 was killed by SIGKILL: worker 1 at generation 0")


def test_the_survivor_is_stopped_at_once_not_after_a_collective_timeout(
    tmp_path: Path, groups: list[Group]
) -> None:
    crash = "if generation == '0':\n    time.sleep(0.5); sys.exit(1)\n"
    group = Group(tmp_path, [HANG_UNTIL_RESTARTED, crash])
    groups.append(group)
    code, err = group.finish(0)
    assert code == contract.EXIT_OK, err
    assert "worker 1 is at generation 1: stopping this generation's program" in err


def test_past_the_budget_the_failing_worker_ends_the_job_with_its_error_and_the_count(
    tmp_path: Path, groups: list[Group]
) -> None:
    """Exit 76 is the Job's FailJob: recreating the pods would spend a second budget. The
    worker stopped with the group exits 1, so it is never taken for the cause."""
    always_fails = "print('RuntimeError: the data loader broke', flush=True); sys.exit(1)"
    group = Group(tmp_path, ["time.sleep(120)", always_fails], budget=2)
    groups.append(group)
    codes = {}
    for i in range(2):
        codes[i], err = group.finish(i)
        assert group.generations(i) == [0, 1, 2]
        assert "the group restarted 2 times (spec.backoffLimit); the budget is spent" in err
    assert codes == {0: contract.EXIT_TRANSIENT, 1: contract.EXIT_RESTARTS_SPENT}


def test_a_config_error_ends_the_worker_without_a_restart(
    tmp_path: Path, groups: list[Group]
) -> None:
    group = Group(tmp_path, ["time.sleep(120)", "sys.exit(78)"])
    groups.append(group)
    code, _ = group.finish(1)
    assert code == contract.EXIT_CONFIG_ERROR
    assert group.generations(1) == [0]
    # The Job fails (podFailurePolicy FailJob) and stops worker 0's pod: SIGTERM.
    group.processes[0].send_signal(signal.SIGTERM)
    code, _ = group.finish(0)
    assert group.generations(0) == [0]


def test_a_known_failure_of_the_program_ends_the_worker_as_a_config_error(
    tmp_path: Path, groups: list[Group]
) -> None:
    """`trainer.known_errors`: it would fail so again after any restart."""
    late_strategy = (
        "print('RuntimeError: Collective ops must be configured at program startup', "
        "file=sys.stderr); sys.exit(1)"
    )
    group = Group(tmp_path, ["time.sleep(120)", late_strategy])
    groups.append(group)
    code, err = group.finish(1)
    assert code == contract.EXIT_CONFIG_ERROR, err
    assert group.generations(1) == [0]


def test_the_same_error_on_every_worker_is_not_retried_at_all(
    tmp_path: Path, groups: list[Group]
) -> None:
    # Both programs reach the error together, as a bug at one line of the program does.
    name_error = together(tmp_path / "runs") + "raise NameError(\"name 'modle' is not defined\")\n"
    group = Group(tmp_path, [name_error, name_error])
    groups.append(group)
    for i in range(2):
        code, err = group.finish(i)
        # 78: the Job's podFailurePolicy fails it rather than recreating the pods.
        assert code == contract.EXIT_CONFIG_ERROR, err
        assert group.generations(i) == [0]
        assert "every worker failed with" in err and "modle" in err
        assert "TFLAUNCH_RESTART" not in group.out[i]


@pytest.mark.parametrize(
    "words",
    [
        # A program's own traceback, TensorFlow's words for a peer lost to heartbeats.
        "tensorflow.python.framework.errors_impl.UnavailableError: The following tasks are "
        "unhealthy (stopped sending heartbeats): /job:worker/replica:0/task:1",
        # The built-in trainer's line for the same (trainer/train.py), no traceback.
        "ERROR training failed because a peer died, froze or restarted (UnavailableError: "
        "Collective ops is aborted by: ...); exiting 1, which may be retried",
    ],
    ids=["tensorflow", "trainer"],
)
def test_the_same_lost_peer_error_on_every_worker_restarts_the_group(
    tmp_path: Path, groups: list[Group], words: str
) -> None:
    """A group fault (a peer starved of CPU past its heartbeats) fails every worker with the
    same words; a restart may fix it, so it is no "failed alike"."""
    lost_peer = (
        "if generation == '0':\n"
        + together(tmp_path / "runs", indent="    ")
        + f"    print({words!r}, file=sys.stderr); sys.exit(1)\n"
    )
    group = Group(tmp_path, [lost_peer, lost_peer])
    groups.append(group)
    for i in range(2):
        code, err = group.finish(i)
        assert code == contract.EXIT_OK, err
        assert group.generations(i) == [0, 1]
        assert "failed alike" not in err


def test_a_sigterm_while_the_program_runs_ends_the_worker(
    tmp_path: Path, groups: list[Group]
) -> None:
    """Kubernetes stopping the pod: the program saves and exits 79, nothing restarts."""
    trap = (
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(79))\n"
        "print('ready', flush=True)\ntime.sleep(120)\n"
    )
    group = Group(tmp_path, [trap, trap])
    groups.append(group)
    for i in range(2):
        group.wait_for_run(i, 0)
    time.sleep(0.5)  # the handler is set once "ready" is printed; the run file comes first
    for process in group.processes:
        process.send_signal(signal.SIGTERM)
    for i in range(2):
        code, err = group.finish(i)
        assert code == contract.EXIT_PREEMPTED, err
        assert group.generations(i) == [0]


def test_a_sigterm_at_the_barrier_ends_the_worker_at_once(
    tmp_path: Path, groups: list[Group]
) -> None:
    group = Group(tmp_path, ["pass", "pass"])
    groups.append(group)
    group.processes[1].kill()  # its peer never comes
    group.processes[1].communicate()
    time.sleep(1.0)
    started = time.monotonic()
    group.processes[0].send_signal(signal.SIGTERM)
    code, _ = group.finish(0)
    assert code == contract.EXIT_TRANSIENT
    assert time.monotonic() - started < 10  # not the 30 s barrier timeout
    assert group.generations(0) == []


def test_a_replaced_peer_restarts_the_survivors_program(
    tmp_path: Path, groups: list[Group]
) -> None:
    """Worker 1's pod recreated (a new wrapper, starting at generation 0): it joins the
    group's next generation, and worker 0 does not train on with its old program."""
    group = Group(tmp_path, [HANG_UNTIL_RESTARTED, HANG_UNTIL_RESTARTED])
    groups.append(group)
    group.wait_for_run(0, 0)
    group.wait_for_run(1, 0)
    group.processes[1].kill()
    group.processes[1].communicate()
    group.processes[1] = group.start(1)
    for i in range(2):
        code, err = group.finish(i)
        assert code == contract.EXIT_OK, err
    assert group.generations(0) == [0, 1]
    assert group.generations(1) == [0, 1]  # the new wrapper went on to the group's generation
    # The survivor still says the restart (the one line status, wait and the operator read),
    # though no wrapper saw a program fail: the dead wrapper took its program with it.
    (restart,) = in_place.restarts(group.out[0].splitlines())
    assert restart.words() == (
        "restart in place 1: a worker's wrapper was replaced (its container or pod restarted)"
    )


def test_a_peer_that_never_comes_is_named_after_the_rendezvous_timeout(tmp_path: Path) -> None:
    port = free_control_ports(2)
    addresses = [f"127.0.0.1:{p}" for p in port]
    tf_config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": 0}}
    done = subprocess.run(
        [*WRAPPER, "--restart-in-place", "3", "--rendezvous-timeout", "1.5", "--",
         sys.executable, "-c", "pass"],
        env=_env({contract.ENV_TF_CONFIG: json.dumps(tf_config)}),
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert done.returncode == contract.EXIT_RENDEZVOUS_TIMEOUT
    assert f"worker 1 (127.0.0.1:{port[1] + 1}, never answered: Connection refused)" in done.stderr


def test_a_failure_after_a_peer_finished_ends_the_worker_not_a_restart_that_waits_for_it(
    tmp_path: Path, groups: list[Group]
) -> None:
    """Worker 1's program finishes (its pod ends for good); worker 0's then fails in what
    would be its last collective. No generation can have worker 1 again: worker 0 exits 1
    with its program's failure instead of waiting for it at the barrier."""
    group = Group(tmp_path, ["time.sleep(2); sys.exit(1)", "pass"])
    groups.append(group)
    assert group.finish(1)[0] == contract.EXIT_OK
    code, err = group.finish(0)
    assert code == contract.EXIT_TRANSIENT, err  # not 75 after the rendezvous timeout
    assert group.generations(0) == [0]
    assert "worker 1 finished (exit 0): no restart can include it" in err


FINISH_ONCE_ALLOWED = (
    "finish = os.path.join({runs!r}, 'finish')\n"
    "if generation == '0' and worker == '1' and not os.path.exists(finish):\n"
    "    time.sleep(0.5); os.kill(os.getpid(), signal.SIGKILL)\n"
    "while not os.path.exists(finish):\n"
    "    time.sleep(0.05)\n"
)
"""Worker 1's first program is killed at generation 0; every program then waits for
`finish`, and ends."""


def _replace_every_wrapper(group: Group, job_uid: str) -> None:
    """The Job controller recreated every pod: no wrapper of the group is left."""
    group.wait_for_run(0, 1)
    group.wait_for_run(1, 1)
    for process in group.processes:
        process.kill()
        process.communicate()
    (group.runs / "finish").touch()
    group.env[contract.ENV_JOB_UID] = job_uid
    group.processes = [group.start(i) for i in range(len(group.processes))]


@pytest.mark.parametrize("same_job", [True, False])
def test_wrappers_that_all_were_replaced_continue_their_jobs_generation(
    tmp_path: Path, groups: list[Group], same_job: bool
) -> None:
    """A plain Job whose every pod was recreated: the count comes from the checkpoint
    volume, keyed by the Job's uid ($TFLAUNCH_JOB_UID); a new Job using the same directory
    starts at 0."""
    uid = "0b6f2d1e-uid-of-the-job"
    body = FINISH_ONCE_ALLOWED.format(runs=str(tmp_path / "runs"))
    checkpoints = tmp_path / "checkpoints"
    group = Group(tmp_path, [body, body], env={
        contract.ENV_JOB_UID: uid, contract.ENV_CHECKPOINT_DIR: str(checkpoints)})  # fmt: skip
    groups.append(group)
    _replace_every_wrapper(group, uid if same_job else "a-new-job-of-the-same-name")
    for i in range(2):
        code, err = group.finish(i)
        assert code == contract.EXIT_OK, err
        assert group.generations(i) == ([0, 1, 1] if same_job else [0, 1, 0])
        named = [r.words() for r in in_place.restarts(group.out[i].splitlines())]
        # The recreated chief's log names the last restart again: status and wait read it.
        expected = "restart in place 1: worker 1 was killed by SIGKILL: worker 1 at generation 0"
        assert named == ([expected] if same_job else [])
