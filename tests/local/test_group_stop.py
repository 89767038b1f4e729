"""How `tflaunch local` stops a group of worker processes (plain Python workers, no TF)."""

from __future__ import annotations

import sys
import threading
import time

from launcher.core import contract
from launcher.local.display import LineConsole
from launcher.local.runner import _Group

# A worker that catches SIGTERM (as a training worker does, to save) and never gets to exit:
# its save waits for a peer that is gone.
_SAVES_FOREVER = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: None)\n"
    "print('ready', flush=True)\n"
    "time.sleep(3600)\n"
)


def _group(tmp_path, *programs: str, grace: float) -> _Group:
    logs = [(tmp_path / f"w{i}.log").open("w") for i in range(len(programs))]
    commands = [([sys.executable, "-c", program], {}) for program in programs]
    return _Group(commands, LineConsole(lambda _: None, verbose=False), logs, grace)


def _ready(tmp_path, count: int, within: float = 120.0) -> None:
    """Every worker printed "ready" (its SIGTERM handler is set): a fixed sleep is not
    enough on a loaded machine, where Python alone may take seconds to start."""
    deadline = time.monotonic() + within
    logs = [tmp_path / f"w{i}.log" for i in range(count)]
    while not all("ready" in log.read_text() for log in logs):
        assert time.monotonic() < deadline, "the workers never printed ready"
        time.sleep(0.05)


def _finishes(action, within: float = 120.0) -> bool:
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    thread.join(within)
    return not thread.is_alive()


def test_a_dead_worker_does_not_make_the_others_wait_out_the_grace_period(tmp_path):
    group = _group(tmp_path, "import time; time.sleep(1); raise SystemExit(1)", _SAVES_FOREVER,
                   grace=3600)  # fmt: skip
    try:
        result = {}
        assert _finishes(lambda: result.update(attempt=group.wait_first_failure())), (
            "the survivor's save can never finish without the dead worker: kill it, not wait"
        )
        assert result["attempt"].exit_codes[0] == 1
        assert all(p.poll() is not None for p in group.processes)
    finally:
        for process in group.processes:
            process.kill()


def test_a_stop_with_every_worker_saving_waits_for_them(tmp_path):
    saves = (
        "import signal, sys, time\n"
        "def save(*_):\n"
        f"    time.sleep(2); sys.exit({contract.EXIT_PREEMPTED})\n"
        "signal.signal(signal.SIGTERM, save)\n"
        "print('ready', flush=True)\n"
        "time.sleep(3600)\n"
    )
    group = _group(tmp_path, saves, saves, grace=3600)
    try:
        _ready(tmp_path, 2)
        assert _finishes(group.stop)
        assert [p.returncode for p in group.processes] == [contract.EXIT_PREEMPTED] * 2
    finally:
        for process in group.processes:
            process.kill()


def test_a_user_stop_kills_the_rest_once_one_worker_ended_without_saving(tmp_path):
    group = _group(tmp_path, "import time; print('ready', flush=True); time.sleep(3600)",
                   _SAVES_FOREVER, grace=3600)  # fmt: skip
    try:
        _ready(tmp_path, 2)
        assert _finishes(group.stop), "worker 0 died of SIGTERM: worker 1 can never save"
        assert group.processes[0].returncode < 0 and group.processes[1].returncode < 0
    finally:
        for process in group.processes:
            process.kill()


def test_a_second_interrupt_while_the_workers_save_stops_them_at_once(tmp_path):
    """Ctrl-C again while stopping: kill now (a plain MWMS program ignores SIGTERM, and the
    wait would be the whole grace period), and the interrupt still ends the run."""
    import _thread

    group = _group(tmp_path, _SAVES_FOREVER, _SAVES_FOREVER, grace=3600)
    rescued: list[bool] = []
    rescue = threading.Timer(120, lambda: [rescued.append(True), *map(_kill, group.processes)])
    try:
        _ready(tmp_path, 2)
        rescue.start()
        threading.Timer(1.0, _thread.interrupt_main).start()
        try:
            group.stop()
        except KeyboardInterrupt:
            pass  # the run ends: tflaunch local's caller says "interrupted"
        else:
            raise AssertionError("the second interrupt was swallowed: the run would go on")
        assert not rescued, "the workers were still saving 120 s after the second interrupt"
        assert [p.returncode for p in group.processes] == [-9, -9]
    finally:
        rescue.cancel()
        for process in group.processes:
            process.kill()


def _kill(process) -> None:
    process.kill()


def test_under_success_policy_chief_worker_0s_exit_0_ends_the_group_and_stops_the_others(
    tmp_path,
):
    logs = [(tmp_path / f"w{i}.log").open("w") for i in range(2)]
    commands = [([sys.executable, "-c", p], {}) for p in ("pass", "import time; time.sleep(3600)")]
    group = _Group(commands, LineConsole(lambda _: None, verbose=False), logs, 1.0,
                   success="chief")  # fmt: skip
    try:
        result = {}
        assert _finishes(lambda: result.update(attempt=group.wait_first_failure()))
        assert result["attempt"].exit_codes == (0, None)  # worker 1 stopped, not failed
        assert result["attempt"].next_step(0, 3, "chief") == "done"
        assert all(p.poll() is not None for p in group.processes)
    finally:
        for process in group.processes:
            process.kill()
