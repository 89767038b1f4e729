"""The operator's decisions, on plain data: a MultiWorkerJob's life from create to TTL."""

from __future__ import annotations

import datetime

import pytest

from launcher.core import contract, labels, load, render
from launcher.operator import crd, progress
from launcher.operator.children import children, trimmed
from launcher.operator.objects import parse_result
from launcher.operator.observe import Observed
from launcher.operator.reconcile import decide, rejected
from tests.operator.sim import RESULT, Cluster, resource, result_log


def _reasons(cluster: Cluster) -> list[str]:
    return [e.reason for e in cluster.events]


def _condition(cluster: Cluster, kind: str) -> str | None:
    return next((c.status for c in cluster.status.conditions if c.type == kind), None)


def _message(cluster: Cluster, kind: str) -> str | None:
    return next((c.message for c in cluster.status.conditions if c.type == kind), None)


# --- creation -----------------------------------------------------------------------------


def test_a_new_job_creates_the_rendered_objects_owned_by_the_resource():
    cluster = Cluster(resource())
    plan = cluster.reconcile()
    kinds = [(o["kind"], o["metadata"]["name"]) for o in plan.create]
    assert kinds == [("Service", "mnist"), ("NetworkPolicy", "mnist-tf-peers"),
                     ("Job", "mnist-worker")]  # fmt: skip
    for obj in plan.create:
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "tflaunch.dev/v1alpha1", "kind": "MultiWorkerJob", "name": "mnist",
            "uid": "mwj-uid-1", "controller": True, "blockOwnerDeletion": True,
        }  # fmt: skip
    assert cluster.status.phase == "Created"
    assert cluster.status.workers == "0/2"
    assert _reasons(cluster) == ["Created"]


def test_a_program_every_worker_would_train_alone_is_a_warning_event_once():
    """What `tflaunch submit` says before it starts a spec.script program, `kubectl apply`
    of the MultiWorkerJob gets as a Warning event (`kubectl describe`), at creation only."""
    program = "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
    cluster = Cluster(resource({"script": {"name": "train.py", "source": program}}))
    cluster.reconcile()
    (warning,) = [e for e in cluster.events if e.type == "Warning"]
    assert warning.reason == "ProgramWarning"
    assert warning.message.startswith(
        "the program creates only strategies of one machine (train.py:2 MirroredStrategy): "
        "each of the 2 workers would train its own copy of the model"
    ), warning.message
    assert _reasons(cluster) == ["Created", "ProgramWarning"]
    cluster.start_workers()
    cluster.settle()
    assert _reasons(cluster).count("ProgramWarning") == 1


def test_a_program_with_a_multi_worker_strategy_gets_no_warning_event():
    program = (
        "import tensorflow as tf\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
        "with strategy.scope():\n    model = tf.keras.Sequential()\n"
    )
    cluster = Cluster(resource({"script": {"name": "train.py", "source": program}}))
    cluster.reconcile()
    assert _reasons(cluster) == ["Created"]


def test_the_children_are_the_cli_render_with_retries_left_to_the_operator():
    body = resource({"activeDeadlineSeconds": 3600})
    job = load.job_from_document(trimmed(body))
    rendered = render.render(job)
    adapted = children(job, body, restarts=2, deadline_seconds=1200)
    assert [o["kind"] for o in adapted] == [o["kind"] for o in rendered]
    cli_job, operator_job = rendered[-1], adapted[-1]
    assert operator_job["spec"]["backoffLimit"] == 0  # the operator restarts the whole group
    assert "ttlSecondsAfterFinished" not in operator_job["spec"]  # the resource's TTL rules
    assert operator_job["spec"]["activeDeadlineSeconds"] == 1200  # what is left of it
    assert operator_job["spec"]["podFailurePolicy"] == cli_job["spec"]["podFailurePolicy"]
    env = operator_job["spec"]["template"]["spec"]["containers"][0]["env"]
    cli_env = cli_job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": contract.ENV_RESTARTS, "value": "2"} in env
    assert [e for e in env if e["name"] != contract.ENV_RESTARTS] == cli_env  # same TF_CONFIG
    assert operator_job["metadata"]["annotations"][labels.GROUP_RESTARTS] == "2"
    assert operator_job["spec"]["template"] == {
        **cli_job["spec"]["template"],
        "spec": {**cli_job["spec"]["template"]["spec"],
                 "containers": operator_job["spec"]["template"]["spec"]["containers"]},
    }  # fmt: skip


def test_the_job_runs_once_every_worker_is_ready():
    cluster = Cluster(resource())
    cluster.reconcile()
    cluster.start_workers()
    cluster.settle()
    assert cluster.status.phase == "Running"
    assert cluster.status.workers == "2/2"
    assert cluster.status.start_time == "2030-01-01T00:00:00Z"
    assert _condition(cluster, "Created") == "True"
    assert _condition(cluster, "Running") == "True"
    assert _reasons(cluster) == ["Created", "Running"]


def test_reconciling_an_unchanged_state_again_does_nothing():
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    again = cluster.reconcile()
    # No status write, no action, no event; only the next look for the chief's progress.
    assert again == type(again)(requeue_after=progress.PROGRESS_REFRESH_SECONDS)


def test_a_resource_being_deleted_is_left_to_the_garbage_collector():
    body = resource()
    body["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    assert decide(Observed(body)) == type(decide(Observed(body)))()


# --- whole-group restart --------------------------------------------------------------------


def test_a_failed_worker_restarts_the_whole_group_from_the_checkpoint():
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.fail_worker(1, exit_code=1, message="a peer died")
    plan = cluster.reconcile()
    assert plan.delete_jobs == ("mnist-worker",)
    assert cluster.status.phase == "Restarting"
    assert cluster.status.restarts == 1
    assert "worker 1" in cluster.status.message and "a peer died" in cluster.status.message
    assert "restart 1 of 3" in cluster.status.message
    plan = cluster.reconcile()  # the old Job is gone: the group is recreated
    (job,) = [o for o in plan.create if o["kind"] == "Job"]
    env = {
        e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env[contract.ENV_RESTARTS] == "1"
    cluster.start_workers()
    cluster.settle()
    assert cluster.status.phase == "Running"
    assert cluster.status.restarts == 1
    assert _reasons(cluster) == ["Created", "Running", "Restarting", "Restarted", "Running"]


def test_an_operator_installed_again_restarts_a_group_that_failed_while_none_ran():
    """docs/operator.md, "Uninstalling": the operator keeps no memory of its own, so one
    installed after the failure decides from the failed Job and pods what the one that was
    running would have decided then."""
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    # Uninstalled: worker 1 fails, worker 0 then fails too (its peer is gone), time passes.
    cluster.fail_worker(1, exit_code=1, message="OOM")
    cluster.fail_worker(0, exit_code=1, message="a peer died")
    cluster.now += datetime.timedelta(hours=2)
    assert cluster.status.phase == "Running"  # what the last operator wrote
    plan = cluster.reconcile()  # the first look of the new operator
    assert plan.delete_jobs == ("mnist-worker",)
    assert cluster.status.phase == "Restarting"
    assert cluster.status.restarts == 1
    assert "restart 1 of 3" in cluster.status.message
    cluster.reconcile()
    cluster.start_workers()
    cluster.settle()
    assert (cluster.status.phase, cluster.status.restarts) == ("Running", 1)


def test_the_new_group_starts_only_after_the_old_jobs_are_gone():
    cluster = Cluster(resource(), keep_terminating=True)
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.fail_worker(0)
    cluster.reconcile()
    waiting = cluster.reconcile()
    assert not waiting.create
    assert waiting.requeue_after is not None
    assert cluster.status.phase == "Restarting"
    cluster.finish_deletions()
    assert [o["kind"] for o in cluster.reconcile().create][-1] == "Job"


def test_per_worker_jobs_are_all_restarted_when_one_worker_fails():
    cluster = Cluster(resource({"layout": "per-worker", "workers": 3,
                                "trainer": {"globalBatchSize": 96}}))  # fmt: skip
    cluster.settle()
    assert sorted(cluster.jobs) == ["mnist-worker-0", "mnist-worker-1", "mnist-worker-2"]
    cluster.start_workers()
    cluster.settle()
    cluster.fail_worker(2)
    plan = cluster.reconcile()
    assert sorted(plan.delete_jobs) == ["mnist-worker-0", "mnist-worker-1", "mnist-worker-2"]
    cluster.settle()
    assert sorted(cluster.jobs) == ["mnist-worker-0", "mnist-worker-1", "mnist-worker-2"]
    assert cluster.status.restarts == 1


def test_the_group_fails_when_its_restart_budget_is_spent():
    cluster = Cluster(resource({"backoffLimit": 1}))
    for _ in range(2):
        cluster.settle()
        cluster.start_workers()
        cluster.settle()
        cluster.fail_worker(0, exit_code=contract.EXIT_RENDEZVOUS_TIMEOUT)
    plan = cluster.reconcile()
    assert cluster.status.phase == "Failed"
    assert cluster.status.reason == "BackoffLimitExceeded"
    assert cluster.status.restarts == 1
    assert cluster.status.completion_time is not None
    assert not plan.create
    assert _condition(cluster, "Failed") == "True"
    assert _condition(cluster, "Running") == "False"


def test_a_config_error_fails_at_once_without_a_restart():
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.fail_worker(1, exit_code=contract.EXIT_CONFIG_ERROR, message="no GPU visible")
    plan = cluster.reconcile()
    assert not plan.delete_jobs and not plan.create  # the failed Job stays, for its logs
    assert cluster.status.phase == "Failed"
    assert cluster.status.reason == "ConfigError"
    assert cluster.status.restarts == 0
    assert "worker 1" in cluster.status.message and "no GPU visible" in cluster.status.message
    assert cluster.events[-1].type == "Warning"


COLLECTIVE_ABORTED = (
    "UnavailableError: {{function_node __wrapped__CollectiveReduceV2}} Collective ops is "
    "aborted by: Error reported from /job:worker/task:1: The following tasks are unhealthy "
    "(stopped sending heartbeats): (the program exited 1)"
)


@pytest.mark.parametrize("layout", ["indexed", "per-worker"])
def test_a_worker_failing_in_a_collective_after_its_peer_finished_fails_without_a_restart(
    layout,
):
    """The programs diverged (a save only the chief makes): a restart would train again to
    fail the same way, so the group fails at once, as `tflaunch local` does."""
    cluster = Cluster(resource({"layout": layout}))
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.finish_worker(1)
    cluster.reconcile()
    cluster.fail_worker(0, exit_code=1, message=f"training...\n{COLLECTIVE_ABORTED}")
    plan = cluster.reconcile()
    assert not plan.create
    assert cluster.status.phase == "Failed"
    assert cluster.status.reason == "ProgramsDiverged"
    assert cluster.status.restarts == 0
    assert cluster.status.message.startswith(
        "worker 0 failed in a collective operation (UnavailableError) after worker 1 had "
        "finished the program (exit 0)"
    ), cluster.status.message
    assert cluster.status.message.endswith("; not retried: a restart would repeat it")


def test_a_collective_error_with_no_finished_peer_is_still_restarted():
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.fail_worker(0, exit_code=1, message=COLLECTIVE_ABORTED)
    cluster.reconcile()
    assert cluster.status.phase == "Restarting"


def test_a_config_error_in_one_per_worker_job_stops_the_others():
    cluster = Cluster(resource({"layout": "per-worker"}))
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.fail_worker(0, exit_code=contract.EXIT_CONFIG_ERROR)
    plan = cluster.reconcile()
    assert plan.delete_jobs == ("mnist-worker-1",)
    assert cluster.status.phase == "Failed"


def test_a_job_past_its_deadline_fails_without_a_restart():
    cluster = Cluster(resource({"activeDeadlineSeconds": 600}))
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.job()["status"] = {"conditions": [
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}  # fmt: skip
    cluster.reconcile()
    assert (cluster.status.phase, cluster.status.reason) == ("Failed", "DeadlineExceeded")


def test_a_restart_gets_only_what_is_left_of_the_deadline():
    cluster = Cluster(resource({"activeDeadlineSeconds": 600}))
    cluster.settle()
    assert cluster.job()["spec"]["activeDeadlineSeconds"] == 600
    cluster.start_workers()
    cluster.settle()
    cluster.now += datetime.timedelta(seconds=450)
    cluster.fail_worker(0)
    cluster.settle()
    assert cluster.job()["spec"]["activeDeadlineSeconds"] == 150


# --- success and TTL --------------------------------------------------------------------------


def test_success_records_the_chiefs_result_from_its_log():
    cluster = Cluster(resource(), chief_log=result_log())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.now += datetime.timedelta(minutes=5)
    cluster.complete()
    cluster.settle()
    status = cluster.status
    assert status.phase == "Succeeded"
    assert status.result == RESULT
    assert status.completion_time == "2030-01-01T00:05:00Z"
    assert "test accuracy 0.9812" in status.message
    assert _reasons(cluster)[-1] == "Succeeded"


def test_success_reads_the_result_from_the_termination_message_first():
    # recreate: a job restarting in place reads the chief's log as a pod ends (its restarts)
    cluster = Cluster(resource({"restart": "recreate"}), chief_log="no result here\n")
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.complete(termination_message=result_log())
    assert cluster.observed().chief_log is None  # no log read needed
    cluster.settle()
    assert cluster.status.result == RESULT


def test_success_without_a_result_line_says_so():
    cluster = Cluster(resource(), chief_log="Traceback...\n")
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.complete()
    cluster.settle()
    assert cluster.status.phase == "Succeeded"
    assert cluster.status.result == {}
    assert "no TFLAUNCH_RESULT line" in cluster.status.message


def test_a_finished_job_is_deleted_once_its_ttl_has_passed():
    cluster = Cluster(resource({"ttlSecondsAfterFinished": 60}), chief_log=result_log())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.complete()
    cluster.settle()
    waiting = cluster.reconcile()
    assert waiting.requeue_after == 60 and not waiting.delete_resource
    cluster.now += datetime.timedelta(seconds=61)
    assert cluster.reconcile().delete_resource
    assert cluster.deleted


def test_a_finished_job_without_ttl_stays():
    cluster = Cluster(resource({"ttlSecondsAfterFinished": None}), chief_log=result_log())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.complete()
    cluster.settle()
    cluster.now += datetime.timedelta(days=365)
    assert cluster.reconcile() == type(cluster.reconcile())()


@pytest.mark.parametrize(
    "text, expected",
    [
        (result_log(), RESULT),
        ("2030-01-01T00:00:00Z " + result_log(), RESULT),  # kubectl logs --timestamps
        (contract.RESULT_LINE_PREFIX + "{not json\n", None),
        (contract.RESULT_LINE_PREFIX + "[1, 2]\n", None),
        ("", None),
        (None, None),
        # a marker glued mid-line is what a program logged, not its result
        ("user said: " + contract.RESULT_LINE_PREFIX + '{"a": 1}\n', None),
        (result_log() + "echo: " + contract.RESULT_LINE_PREFIX + '{"a": 1}\n', RESULT),
    ],
)
def test_the_result_is_the_last_well_formed_result_line(text, expected):
    assert parse_result(text) == expected


# --- suspend, Kueue, spec changes ----------------------------------------------------------


def test_a_job_created_suspended_creates_suspended_jobs():
    cluster = Cluster(resource({"suspend": True}))
    cluster.settle()
    assert cluster.job()["spec"]["suspend"] is True
    assert cluster.status.phase == "Suspended"
    assert _condition(cluster, "Suspended") == "True"


def test_suspend_and_resume_are_propagated_to_the_jobs():
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.edit(suspend=True)
    plan = cluster.reconcile()
    assert plan.patch_jobs == (
        ("mnist-worker", {"metadata": {"annotations": {labels.SUSPEND_REQUESTED: "true"}},
                          "spec": {"suspend": True}}),
    )  # fmt: skip
    assert cluster.status.phase == "Suspended"
    assert cluster.status.workers == "0/2"
    cluster.settle()
    cluster.edit(suspend=False)
    cluster.reconcile()
    assert cluster.job()["spec"]["suspend"] is False
    cluster.start_workers()
    cluster.settle()
    assert cluster.status.phase == "Running"
    assert _reasons(cluster) == ["Created", "Running", "Suspended", "Resumed", "Running"]


def test_a_job_suspended_by_kueue_is_queued_and_not_resumed_by_the_operator():
    cluster = Cluster(resource({"labels": {"kueue.x-k8s.io/queue-name": "team-a"}}))
    cluster.settle()
    cluster.job()["spec"]["suspend"] = True  # Kueue's webhook suspends the new Job
    plan = cluster.settle()
    assert not plan.patch_jobs
    assert (cluster.status.phase, cluster.status.reason) == ("Suspended", "Queued")
    cluster.job()["spec"]["suspend"] = False  # admitted
    cluster.start_workers()
    cluster.settle()
    assert cluster.status.phase == "Running"
    assert all(not p.patch_jobs for p in cluster.plans)


def test_a_job_kueue_holds_back_says_why_in_kueues_words_and_is_looked_at_again():
    cluster = Cluster(resource({"labels": {"kueue.x-k8s.io/queue-name": "team-a"}}))
    cluster.settle()
    cluster.job()["spec"]["suspend"] = True
    cluster.workloads = [
        {
            "metadata": {"name": "job-mnist-worker-1", "labels": {
                "kueue.x-k8s.io/job-uid": cluster.job()["metadata"]["uid"]}},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "False",
                                       "message": "insufficient quota for nvidia.com/gpu"}]},
        }
    ]  # fmt: skip
    plan = cluster.settle()
    assert (cluster.status.reason, _message(cluster, "Suspended")) == (
        "Queued",
        "waiting for Kueue admission in queue team-a: insufficient quota for nvidia.com/gpu",
    )
    assert plan.requeue_after is not None  # a Workload's new message changes no Job
    cluster.workloads = None  # not readable (no Kueue CRDs, no RBAC)
    cluster.settle()
    assert _message(cluster, "Suspended") == (
        "the Jobs are suspended by someone else, e.g. queued by Kueue"
    )


def test_a_spec_edit_while_running_is_rejected_once_with_an_event():
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.edit(workers=4)
    cluster.settle()
    cluster.reconcile()
    assert _reasons(cluster).count("SpecChangeRejected") == 1
    assert cluster.job()["spec"]["completions"] == 2  # still the old group
    assert cluster.status.phase == "Running"
    assert "spec.suspend: true to apply it" in cluster.status.message


def test_operator_settings_apply_while_running_without_recreating_jobs():
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.edit(backoffLimit=10, ttlSecondsAfterFinished=5)
    cluster.settle()
    assert "SpecChangeRejected" not in _reasons(cluster)
    assert not any(p.delete_jobs for p in cluster.plans)


def test_a_spec_edit_while_suspended_recreates_the_jobs_from_the_new_spec():
    cluster = Cluster(resource({"suspend": True}))
    cluster.settle()
    cluster.edit(workers=4)
    plan = cluster.reconcile()
    assert plan.delete_jobs == ("mnist-worker",)
    assert "SpecChanged" in _reasons(cluster)
    cluster.settle()
    assert cluster.job()["spec"]["completions"] == 4
    assert cluster.job()["spec"]["suspend"] is True
    cluster.edit(suspend=False)
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    assert (cluster.status.phase, cluster.status.workers) == ("Running", "4/4")


def test_an_invalid_spec_fails_naming_the_field_and_recovers_once_fixed():
    cluster = Cluster(resource({"workers": 3}))  # 256 does not split across 3 workers
    cluster.settle()
    assert (cluster.status.phase, cluster.status.reason) == ("Failed", "InvalidSpec")
    assert "spec.trainer.globalBatchSize" in cluster.status.message
    assert not cluster.jobs
    cluster.edit(workers=4)
    cluster.settle()
    assert cluster.status.phase == "Created"
    assert cluster.job()["spec"]["completions"] == 4


def test_an_invalid_edit_of_a_running_job_is_rejected_and_the_job_keeps_running():
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.edit(workers=3)
    cluster.settle()
    assert cluster.status.phase == "Running"
    assert "SpecChangeRejected" in _reasons(cluster)


def test_a_job_of_the_same_name_that_is_not_ours_is_left_alone():
    foreign = Cluster(resource()).reconcile().create[-1]
    foreign["metadata"].pop("ownerReferences")
    foreign["metadata"]["uid"] = "submitted-by-the-cli"
    cluster = Cluster(resource(), jobs={"mnist-worker": foreign})
    plan = cluster.reconcile()
    assert not plan.create and not plan.delete_jobs
    assert (cluster.status.phase, cluster.status.reason) == ("Failed", "NameConflict")
    assert plan.requeue_after
    del cluster.jobs["mnist-worker"]
    cluster.settle()
    assert cluster.status.phase == "Created"


def test_jobs_deleted_by_hand_are_recreated():
    cluster = Cluster(resource())
    cluster.settle()
    cluster.jobs.clear()
    plan = cluster.reconcile()
    assert [o["metadata"]["name"] for o in plan.create if o["kind"] == "Job"] == ["mnist-worker"]


def test_a_spec_the_api_server_refused_is_tried_again_only_once_edited():
    cluster = Cluster(resource())
    refused = rejected(cluster.observed(), "the API server rejected Job mnist-worker: tolerations")
    cluster.resource["status"] = crd.document_of(refused.status)
    assert (cluster.status.phase, cluster.status.reason) == ("Failed", "Rejected")
    assert cluster.reconcile() == type(refused)()  # the same spec would be refused again
    cluster.edit(tolerations=[])
    assert [o["kind"] for o in cluster.reconcile().create][-1] == "Job"


def test_an_edit_made_together_with_suspend_is_applied_without_a_warning():
    cluster = Cluster(resource())
    cluster.settle()
    cluster.start_workers()
    cluster.settle()
    cluster.edit(workers=4, suspend=True)
    cluster.settle()
    assert "SpecChangeRejected" not in _reasons(cluster)
    assert cluster.job()["spec"]["completions"] == 4
    assert cluster.status.phase == "Suspended"
