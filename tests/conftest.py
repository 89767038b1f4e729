"""Shared test configuration. Suites: core/, local/, trainer/, cluster/, operator/, infra/, e2e/,
image/, node/.

`make test` runs the suite on pytest-xdist workers (see docs/testing.md); the scheduler
below decides what may run side by side on a 2-core machine.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

# Tests press Ctrl-C (SIGINT) on `tflaunch` and the worker wrapper. A shell without job control
# that starts the suite in the background (`make test &` in a script) leaves SIGINT ignored;
# every child inherits that, Python then installs no handler, and those tests wait out their
# timeouts. Restoring the handler here gives the children SIGINT's default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Modules whose tests run TensorFlow: 2-worker MWMS groups (`tf` marker) or models in-process.
# Each such test keeps both cores busy, so they all run on one xdist worker, one after
# another: the rendezvous, heartbeat and preemption timings they exercise see the same
# machine as in a serial run, while the e2e tests (which mostly wait on their own control
# plane) and the rest run beside them.
TENSORFLOW_MODULES = frozenset(
    {
        "tests/image/test_gpu_image.py",
        "tests/image/test_images.py",
        "tests/local/test_keras_programs.py",
        "tests/local/test_live_bar.py",
        "tests/local/test_own_programs.py",
        "tests/local/test_preemption.py",
        "tests/local/test_preemption_own_program.py",
        "tests/local/test_run_outputs.py",
        "tests/local/test_tfjob_local.py",
        "tests/local/test_tutorial_notebook.py",
        "tests/local/test_runner.py",
        "tests/trainer/test_preemption_words.py",
        "tests/trainer/test_trainer_cli.py",
        "tests/trainer/test_trainer_data.py",
        "tests/trainer/test_trainer_heartbeat.py",
        "tests/trainer/test_trainer_model.py",
        "tests/trainer/test_trainer_multiworker.py",
        "tests/trainer/test_trainer_precision.py",
        "tests/trainer/test_sigterm_at_strategy_start.py",
    }
)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


# The real node (hack/node.sh) and the kind rig (hack/kind.sh) are one per machine each: every
# module of tests/node/ runs on one xdist worker, in one unit, so that one session fixture
# owns the node, and every module of tests/kind/ in another, for the rig.
NODE_SUITE = "tests/node/"
KIND_SUITE = "tests/kind/"
RIG_SUITES = {NODE_SUITE: "node", KIND_SUITE: "kind"}


def _rig_unit(module: str) -> str | None:
    return next((unit for suite, unit in RIG_SUITES.items() if module.startswith(suite)), None)


def _rank(item: pytest.Item) -> int:
    module = _module(item.nodeid)
    if module in TENSORFLOW_MODULES:
        return 0
    if _rig_unit(module):  # the longest units after TensorFlow's: handed out next
        return 1
    return 2 if module.startswith("tests/e2e/") else 3


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker: the TensorFlow modules first, then the real node's and the kind
    rig's units (every module of tests/node, of tests/kind: the longest after TensorFlow's,
    so they must start at once), then the e2e modules (long waits), then the quick rest,
    which fills the gaps at the end; the scheduler hands out modules in this order."""
    if hasattr(config, "workerinput"):
        items.sort(key=_rank)  # stable: the same order on every worker, modules kept whole


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A `tf` test outside TENSORFLOW_MODULES fails: under xdist it would run beside the
    other TensorFlow tests."""
    module = _module(item.nodeid)
    if item.get_closest_marker("tf") and module not in TENSORFLOW_MODULES:
        pytest.fail(
            f"{module} has tests marked tf: add it to TENSORFLOW_MODULES in tests/conftest.py",
            pytrace=False,
        )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole modules per worker (module-scoped fixtures such as a running operator or a
    finished local run are set up once), and every TensorFlow module in one unit, handed
    out in the workers' collection order (above), so the long TensorFlow unit starts at once.

    The unit is chosen from the node id alone (the controller collects nothing), which is
    why TENSORFLOW_MODULES lists modules rather than reading the `tf` marker."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # keep that order, not "most tests first"

    class TensorFlowApart(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = _module(nodeid)
            if module in TENSORFLOW_MODULES:
                return "tensorflow"
            return _rig_unit(module) or module

    return TensorFlowApart(config, log)
