"""What a restart in place does not retry, on real pods (spec.restart: inPlace, plain Jobs
from `tflaunch submit`): a program of the user's own (`spec.script`, no TensorFlow, so each
test costs a pod start, not a training) that fails with the same NameError on every worker
is reported once and not retried; one that fails on worker 1 every time stops at the budget
(spec.backoffLimit 2: two restarts in place, then exit 76) with the cause named. In both
the Job fails by its podFailurePolicy: no pod is recreated.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import ControlPlane
from tests.node.jobs import (  # noqa: F401 (fixtures)
    namespace,
    real_node_spec,
    shared_claim,
)
from tests.node.test_restart_in_place import pods_created

pytestmark = [pytest.mark.node, pytest.mark.slow]

SAME_NAME_ERROR = """
import os, time
# Both workers reach the bug together, as a bug on one line of the program does: they meet
# on the shared volume first.
here = os.path.join(os.environ["TFLAUNCH_CHECKPOINT_DIR"], "met")
os.makedirs(here, exist_ok=True)
open(os.path.join(here, os.environ["TFLAUNCH_WORKER_INDEX"]), "w").close()
while len(os.listdir(here)) < 2:
    time.sleep(0.01)
modle.fit()
"""
WORKER_1_BREAKS = """
import os, sys, time
if os.environ["TFLAUNCH_WORKER_INDEX"] == "1":
    time.sleep(1)
    print("RuntimeError: the data loader broke", flush=True)
    sys.exit(1)
time.sleep(300)
"""


def script_spec(path: Path, where: str, image: str, source: str) -> Path:
    spec = real_node_spec(path, where, image, "indexed")
    document = yaml.safe_load(spec.read_text())
    document["spec"].pop("trainer")
    document["spec"].update(
        script={"name": "train.py", "source": source},
        checkpoint={"claimName": "checkpoints"},
        restart="inPlace",
        backoffLimit=2,
    )
    spec.write_text(yaml.safe_dump(document))
    return spec


@pytest.mark.timeout(600)
def test_a_name_error_on_every_worker_is_reported_once_and_not_retried(
    real_node: ControlPlane,
    trainer_image: str,
    namespace: str,  # noqa: F811
    shared_claim: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    spec = script_spec(tmp_path / "job.yaml", namespace, trainer_image, SAME_NAME_ERROR)

    run = real_node.tflaunch("submit", str(spec), "--wait", "--timeout", "5m", timeout=400)

    assert run.code == 3, run  # failed
    assert "every worker failed alike, a restart repeats it: NameError: name 'modle'" in run.err
    assert "not retried" in run.err, run.err
    assert "restart in place" not in run.err, run.err
    created = pods_created(real_node, namespace)
    assert len(created) == 2, f"a pod was recreated: {created}"


@pytest.mark.timeout(600)
def test_a_crash_loop_stops_at_the_budget_with_the_cause_named(
    real_node: ControlPlane,
    trainer_image: str,
    namespace: str,  # noqa: F811
    shared_claim: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    spec = script_spec(tmp_path / "job.yaml", namespace, trainer_image, WORKER_1_BREAKS)

    run = real_node.tflaunch("submit", str(spec), "--wait", "--timeout", "5m", timeout=400)

    assert run.code == 3, run
    assert (
        "worker 1 exited 76 (restart budget spent): RuntimeError: the data loader broke "
        "(the program exited 1); the group restarted 2 times (spec.backoffLimit)"
    ) in run.err, run.err
    created = pods_created(real_node, namespace)
    assert len(created) == 2, f"a pod was recreated: {created}"
    status = real_node.tflaunch("status", "mnist", "-n", namespace)
    assert "restarts in place: 2; the last: worker 1 exited 1: RuntimeError" in status.out, status
