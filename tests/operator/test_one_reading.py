"""The CLI (`launcher.cluster.status`), the operator and `tflaunch local` read the same objects
the same way: each test feeds one set of Jobs and Pods (or one exit code) to every path.

Each test stands for a disagreement there was: "complete" was Complete or SuccessCriteriaMet
for `status` but only Complete for the operator; a worker's terminated state had three
fallbacks; preemptions were grouped by grace window for the operator but by grace window and
saved step for `status`; and the restart policy was written three times.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from launcher.api.status import Status
from launcher.cli import operator_jobs
from launcher.cluster import status
from launcher.core import contract, worker_end
from launcher.core.timestamps import format_time
from launcher.core.worker_end import GroupEnd
from launcher.operator import crd, preemptions
from tests.operator.sim import T0, Cluster, resource

SECOND = datetime.timedelta(seconds=1)


def _running(backoff_limit: int = 3) -> Cluster:
    cluster = Cluster(resource({"backoffLimit": backoff_limit}))
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    return cluster


def _cli_state(cluster: Cluster) -> str:
    return status.summarize(
        "mnist", "default", list(cluster.jobs.values()), list(cluster.pods.values())
    ).state


def test_a_job_whose_success_criteria_are_met_has_succeeded_for_status_and_the_operator():
    cluster = _running()
    cluster.complete()
    for job in cluster.jobs.values():  # Kubernetes >= 1.31, while the last pods terminate
        job["status"]["conditions"] = [{"type": "SuccessCriteriaMet", "status": "True"}]
    cluster.reconcile()
    assert (_cli_state(cluster), cluster.status.phase) == ("Succeeded", "Succeeded")


def _exited_79(name: str, finished: datetime.datetime, step: int | None, **where: Any) -> dict:
    """A worker pod whose trainer saved at `step` and exited 79 at `finished`; `where`
    says where its container status keeps that (container name, state key)."""
    message = f"preempted: every worker saved at step {step} (epoch 1)" if step else ""
    ended = {"exitCode": 79, "finishedAt": format_time(finished), "message": message}
    container: dict[str, Any] = {"name": where.get("container", "trainer")}
    if where.get("key", "state") == "state":
        container["state"] = {"terminated": ended}
    else:
        container["state"] = {"waiting": {"reason": "ContainerCreating"}}
        container["lastState"] = {"terminated": ended}
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": format_time(finished - 60 * SECOND),
            "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
        },
        "spec": {"terminationGracePeriodSeconds": 30},
        "status": {"phase": "Failed", "containerStatuses": [container]},
    }


def _counts(pods: list[dict]) -> tuple[int, int]:
    """(what `tflaunch status` counts, what the operator records) for `pods`."""
    cli = status.summarize("mnist", "default", [], pods).preemptions.count
    operator = preemptions.record(crd.Status(), copy.deepcopy(pods), grace_seconds=30)
    return cli, operator.preemptions


@pytest.mark.parametrize(
    "where",
    [{"key": "lastState"}, {"container": "main"}],
    ids=["terminated-in-lastState", "container-not-named-trainer"],
)
def test_status_and_the_operator_read_a_worker_s_exit_from_the_same_container_state(where):
    pods = [_exited_79("w0-a", T0, 70, **where), _exited_79("w1-a", T0 + SECOND, 70, **where)]
    assert _counts(pods) == (1, 1)


def test_two_preemptions_at_two_steps_within_one_grace_period_count_twice_for_both():
    pods = [
        _exited_79("w0-a", T0, 10),
        _exited_79("w1-a", T0 + SECOND, 10),
        _exited_79("w0-b", T0 + 10 * SECOND, 20),  # the replaced group, preempted again
        _exited_79("w1-b", T0 + 11 * SECOND, 20),
    ]
    assert _counts(pods) == (2, 2)


def test_the_operator_counts_a_second_preemption_at_another_step_in_a_later_reconcile():
    first = [_exited_79("w0-a", T0, 10), _exited_79("w1-a", T0 + SECOND, 10)]
    once = preemptions.record(crd.Status(), first, grace_seconds=30)
    later = [*first, _exited_79("w0-b", T0 + 10 * SECOND, 20)]
    twice = preemptions.record(once, later, grace_seconds=30)
    assert (once.preemptions, twice.preemptions, twice.resumed_at_step) == (1, 2, 20)
    assert preemptions.record(twice, later, grace_seconds=30) == twice


# --- one Status: what a plain job's objects say is what the operator stores --------------------

OBSERVED = (
    "phase", "workers", "workers_ready", "workers_total",
    "preemptions", "resumed_at_step", "last_preemption_time",
)  # fmt: skip
"""The Status fields the Jobs and Pods decide (restarts, conditions and times are the
operator's own bookkeeping of what it did)."""


def _both(cluster: Cluster) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the Status `tflaunch status` computes from the objects as for a plain job, the
    MultiWorkerJob's .status the operator stored, read by the CLI into the same type)."""
    summary = status.summarize(
        "mnist", "default", list(cluster.jobs.values()), list(cluster.pods.values())
    )
    stored = operator_jobs.with_resource(summary, cluster.resource).operator
    assert isinstance(summary.status, Status) and isinstance(stored, Status)
    return (
        {key: getattr(summary.status, key) for key in OBSERVED},
        {key: getattr(stored, key) for key in OBSERVED},
    )


def _preempted_once(cluster: Cluster, step: int) -> None:
    """Every worker saves at `step` and exits 79; the Jobs replace the pods, which run."""
    for pod in list(cluster.pods.values()):
        ended = copy.deepcopy(pod)
        ended["metadata"]["name"] += "-preempted"
        ended["metadata"]["creationTimestamp"] = format_time(T0 - 60 * SECOND)
        ended["status"] = {
            "phase": "Failed",
            "containerStatuses": [{"name": "trainer", "state": {"terminated": {
                "exitCode": 79, "finishedAt": format_time(T0),
                "message": f"preempted: every worker saved at step {step} (epoch 1)",
            }}}],
        }  # fmt: skip
        cluster.pods[ended["metadata"]["name"]] = ended


@pytest.mark.parametrize("moment", ["waiting", "running", "preempted", "succeeded"])
def test_a_plain_job_s_status_is_the_status_the_operator_stores_for_the_same_objects(moment):
    cluster = Cluster(resource({"backoffLimit": 3}))
    cluster.settle()  # the Jobs exist, no pod runs yet
    if moment != "waiting":
        cluster.start_workers()
    if moment == "preempted":
        _preempted_once(cluster, step=70)
    if moment == "succeeded":
        cluster.complete()
    cluster.settle()
    cli, operator = _both(cluster)
    assert cli == operator
    expected_phase = {"waiting": "Created", "succeeded": "Succeeded"}.get(moment, "Running")
    assert (cli["phase"], cli["preemptions"]) == (expected_phase, int(moment == "preempted"))


# --- one exit-code table ---------------------------------------------------------------------


def _job_controller(job: dict[str, Any], code: int) -> str:
    """What the Job controller does with a pod that exited `code`, read from the rendered
    Job's own podFailurePolicy: "succeed", "FailJob", "Ignore" or "Count"."""
    if code == 0:
        return "succeed"
    for rule in job["spec"]["podFailurePolicy"]["rules"]:
        on = rule.get("onExitCodes")
        if (
            on
            and on["containerName"] == "trainer"
            and (code in on["values"]) == (on["operator"] == "In")
        ):
            return str(rule["action"])
    return "Count"


def _operator(code: int) -> str:
    """The operator's decision when worker 0 exits `code`, the Job controller playing its
    part as the rendered podFailurePolicy says."""
    cluster = _running(backoff_limit=3)
    job = next(iter(cluster.jobs.values()))
    action = _job_controller(job, code)
    if action == "succeed":
        cluster.complete()
    else:
        pod = sorted(cluster.pods.values(), key=lambda p: p["metadata"]["name"])[0]
        ended = copy.deepcopy(pod)
        ended["metadata"]["name"] += "-ended"
        ended["status"] = {
            "phase": "Failed",
            "containerStatuses": [{"name": "trainer", "state": {"terminated": {
                "exitCode": code, "reason": "Error", "finishedAt": format_time(cluster.now),
            }}}],
        }  # fmt: skip
        cluster.pods[ended["metadata"]["name"]] = ended
        if action == "Ignore":
            pass  # the Job replaces the pod; it neither fails nor counts it
        else:  # FailJob, or Count against the child Job's backoffLimit 0
            reason = "PodFailurePolicy" if action == "FailJob" else "BackoffLimitExceeded"
            job["status"] = {
                "failed": 1,
                "conditions": [{"type": "Failed", "status": "True", "reason": reason}],
            }
    cluster.reconcile()
    phase = cluster.status.phase
    return {"Succeeded": "done", "Running": "resume", "Restarting": "restart"}.get(phase, "fail")


KUBERNETES = {"succeed": "done", "Ignore": "resume", "Count": "restart", "FailJob": "fail"}
"""The Job controller's action on a pod, as what it means for the group."""


def test_every_exit_code_means_the_same_to_the_job_the_operator_and_local_mode():
    cluster = _running()
    job = next(iter(cluster.jobs.values()))
    disagreements = []
    for code in range(256):
        kubernetes = KUBERNETES[_job_controller(job, code)]
        local = GroupEnd.of((code, 0)).next_step(0, backoff_limit=3)
        operator = _operator(code)
        if not kubernetes == local == operator:
            disagreements.append((code, kubernetes, local, operator))
    assert disagreements == []
    assert KUBERNETES[_job_controller(job, contract.EXIT_CONFIG_ERROR)] == "fail"


def test_a_worker_failing_in_a_collective_after_its_peer_finished_is_one_failure_for_both():
    """The operator and local mode read the same divergence, and say it in the same words."""
    error = (
        "UnavailableError: Collective ops is aborted by: Error reported from "
        "/job:worker/task:1 (the program exited 1)"
    )
    attempt = GroupEnd.of((1, 0), (error, None))
    cluster = _running()
    cluster.finish_worker(1)
    cluster.fail_worker(0, exit_code=1, message=error)
    cluster.reconcile()
    assert attempt.next_step(0, backoff_limit=3) == "fail"
    assert cluster.status.phase == "Failed"
    assert attempt.divergence is not None
    assert cluster.status.message.startswith(attempt.divergence.describe())


KILLED = "3/70 [>....] - ETA: 5s - loss: 4.3331 (the program was killed by SIGKILL)"
TIMED_OUT = ":DEADLINE_EXCEEDED:Deadline Exceeded {grpc_status:4} (the program exited 1)"
NO_DATA = "no data at /data (the program exited 78)"
PEERS = "peers never came: mnist-worker-1.mnist:2222"
LOST = "UnavailableError: peer lost (the program exited 1)"


@pytest.mark.parametrize(
    "exits, sentence",
    [
        pytest.param(  # the survivor's timeout reaches tflaunch before the killed worker's end
            [(0, 1, TIMED_OUT), (1, 1, KILLED)],
            "worker 1 was killed by SIGKILL: 3/70 [>....] - ETA: 5s - loss: 4.3331 "
            "(worker 0 exited 1 too)",
            id="a worker killed",
        ),
        pytest.param(
            [(1, 78, NO_DATA)],
            "worker 1 exited 78 (configuration error): no data at /data; not retried: a "
            "restart cannot fix it",
            id="a configuration error",
        ),
        pytest.param(
            [(1, 1, LOST), (0, 75, PEERS)],
            f"worker 0 exited 75 (peers never came): {PEERS} (worker 1 exited 1 too)",
            id="a peer timing out first",
        ),
        pytest.param(  # the same kind of end: the first to end is the cause, not worker 0
            [(1, 1, "ValueError: bad shape (the program exited 1)"), (0, 1, LOST)],
            "worker 1 exited 1: ValueError: bad shape (worker 0 exited 1 too)",
            id="the first of two plain failures",
        ),
    ],
)
def test_local_mode_wait_and_the_operator_blame_the_same_worker_in_the_same_words(exits, sentence):
    """`exits`: (worker, exit code, last error) in the order they ended, a second apart."""
    finished = {index: T0 + (n + 1) * SECOND for n, (index, _, _) in enumerate(exits)}
    codes = {index: code for index, code, _ in exits}
    errors = {index: error for index, _, error in exits}
    local = GroupEnd.of(
        [codes.get(i) for i in range(2)],
        [errors.get(i) for i in range(2)],
        signals=[worker_end.program_signal(errors.get(i)) for i in range(2)],
        finished=[finished.get(i) for i in range(2)],
    )
    cluster = _running()
    for index, code, error in exits:
        cluster.fail_worker(index, code, error, format_time(finished[index]))
    jobs, pods = list(cluster.jobs.values()), list(cluster.pods.values())
    wait = status.failure_message(status.summarize("mnist", "default", jobs, pods))
    cluster.reconcile()
    said = {"local": local.describe(), "wait": wait, "operator": cluster.status.message}
    if why := worker_end.not_retried(local.culprit):
        said["local"] += f"; {why}"
    assert {mode: sentence in text for mode, text in said.items()} == dict.fromkeys(said, True), (
        said
    )
