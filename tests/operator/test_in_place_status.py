"""With spec.restart inPlace (the default) the operator counts the restarts the wrappers made
inside the same pods (their TFLAUNCH_RESTART lines in the chief's log,
`launcher.core.in_place`) in status.restarts, names the last in status.lastRestartInPlace,
posts one event each and counts them in a metric; the budget, spec.backoffLimit, is one for
both kinds of restart. Pure decisions on the simulated cluster of sim.py."""

from __future__ import annotations

import copy
import datetime

from prometheus_client import CollectorRegistry

from launcher.core import contract
from launcher.core import progress as progress_lib
from launcher.core.progress import Progress
from launcher.operator import in_place
from launcher.operator.metrics import OperatorMetrics
from tests.operator.sim import T0, Cluster, resource, result_log

KILLED = "Epoch 2/5 (the program was killed by SIGKILL)"
PEER = "UnavailableError: Collective ops is aborted by: worker 1 (the program exited 1)"
SECOND = datetime.timedelta(seconds=1)


def log(*generations: int) -> str:
    lines = [progress_lib.format_line(Progress(1, 5, 10, 469))]
    for generation in generations:
        lines.append(contract.restart_line(generation, [(0, PEER), (1, KILLED)]))
        lines.append(progress_lib.format_line(Progress(2, 5, 10, 469, generation=generation)))
    return "\n".join(lines)


def running(backoff_limit: int = 3) -> Cluster:
    spec = {"restart": "inPlace", "backoffLimit": backoff_limit}
    cluster = Cluster(resource(spec), chief_log=log())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    return cluster


def test_a_restart_in_place_is_counted_named_and_said_in_one_event() -> None:
    cluster = running()
    cluster.chief_log = log(1)
    cluster.now = T0 + 31 * SECOND
    cluster.settle()
    assert cluster.status.restarts == 1
    assert cluster.status.phase == "Running"
    words = "restart in place 1: worker 1 was killed by SIGKILL: Epoch 2/5 (worker 0 exited 1 too)"
    assert cluster.status.last_restart_in_place == words
    said = [e for e in cluster.events if e.reason == in_place.RESTARTED_IN_PLACE]
    assert [(e.type, e.message) for e in said] == [
        ("Warning", f"{words}; every worker restarts its program in its pod, resuming from "
                    "the last checkpoint"),
    ]  # fmt: skip
    assert cluster.jobs and not any(
        p["status"]["phase"] != "Running" for p in cluster.pods.values()
    )


def test_each_restart_in_place_is_said_once_however_often_the_log_is_read() -> None:
    cluster = running()
    for seconds, generations in ((31, (1,)), (62, (1, 2)), (93, (1, 2))):
        cluster.chief_log = log(*generations)
        cluster.now = T0 + seconds * SECOND
        cluster.settle()
    said = [e.message for e in cluster.events if e.reason == in_place.RESTARTED_IN_PLACE]
    assert [m.split(":")[0] for m in said] == ["restart in place 1", "restart in place 2"]
    assert cluster.status.restarts == 2


def test_a_group_the_operator_recreates_after_restarts_in_place_continues_their_count() -> None:
    cluster = running()
    cluster.chief_log = log(1)
    cluster.now = T0 + 31 * SECOND
    cluster.settle()
    cluster.fail_worker(1, message="the pod's node was lost")
    cluster.settle()
    assert cluster.status.restarts == 2  # one in place, then the operator's
    env = {
        e["name"]: e.get("value")
        for e in cluster.job()["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env[contract.ENV_RESTARTS] == "2"  # the new wrappers start at generation 2


def test_the_budget_spent_in_place_fails_the_job_at_once_naming_the_cause() -> None:
    """The wrappers exit 1 past spec.backoffLimit restarts in place; the failed pod makes the
    operator read the chief's log at once (not 30 s later), so it counts them and fails."""
    cluster = running(backoff_limit=2)
    cluster.chief_log = log(1, 2)
    cluster.now = T0 + 5 * SECOND  # progress not due: the failed pod is why the log is read
    cluster.fail_worker(1, message=KILLED)
    cluster.settle()
    assert cluster.status.phase == "Failed"
    assert cluster.status.restarts == 2
    assert "worker 1 was killed by SIGKILL: Epoch 2/5" in cluster.status.message
    assert "restarted 2 times" in cluster.status.message


def test_the_restarts_in_place_since_the_last_read_are_counted_when_the_job_succeeds() -> None:
    cluster = running()
    cluster.chief_log = log(1)
    cluster.now = T0 + 5 * SECOND  # progress not due: the ended pods are why the log is read
    cluster.complete(termination_message=result_log())  # the result needs no log read
    cluster.settle()
    assert cluster.status.phase == "Succeeded"
    assert cluster.status.restarts == 1
    assert cluster.status.last_restart_in_place.startswith("restart in place 1: worker 1 was")


def test_a_recreate_job_reads_no_log_when_a_pod_fails() -> None:
    cluster = Cluster(resource({"restart": "recreate"}), chief_log=log(1))
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.now = T0 + 5 * SECOND
    cluster.fail_worker(1, message=KILLED)
    assert cluster.observed().chief_log is None


def test_a_job_with_restart_unwritten_restarts_in_place_and_reads_the_log_at_once() -> None:
    cluster = Cluster(resource(), chief_log=log(1))
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.now = T0 + 5 * SECOND
    cluster.fail_worker(1, message=KILLED)
    assert cluster.observed().chief_log == log(1)


def test_the_metric_counts_the_restarts_in_place_apart() -> None:
    metrics = OperatorMetrics(CollectorRegistry())
    cluster = running()
    cluster.chief_log = log(1, 2)
    cluster.now = T0 + 31 * SECOND
    old = copy.deepcopy(cluster.resource)
    plan = cluster.reconcile()
    restarted = [e for e in plan.events if e.reason == in_place.RESTARTED_IN_PLACE]
    metrics.reconciled("default", "mnist", old, plan.status, len(restarted))
    registry = metrics.registry
    assert (
        registry.get_sample_value(
            "tflaunch_group_restarts_in_place_total", {"namespace": "default"}
        )
        == 2
    )
