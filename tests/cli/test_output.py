"""The renderings of `-o json|yaml|wide|name`: documents that match docs/output-schema.json,
tables a person reads, and the watch printer that adds a row only when one changes."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from launcher.cli import job_progress, output, watching
from launcher.cluster import doctor, status
from launcher.core import contract
from tests.cluster.conftest import job_objects
from tests.cluster.objects import pod_for, with_active, with_condition

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "output-schema.json").read_text())
NOW = datetime.datetime.now(tz=datetime.timezone.utc)


def validate(document: Any) -> None:
    jsonschema.Draft202012Validator(SCHEMA).validate(document)


def indexed_job(**overrides: Any) -> dict[str, Any]:
    return job_objects(**overrides)[-1]


def failed_worker_status() -> status.JobStatus:
    job = with_condition(indexed_job(), "Failed", "PodFailurePolicy", "exit 78")
    pods = [
        pod_for(job, 0, phase="Failed", exit_code=78),
        pod_for(job, 1, phase="Pending", unschedulable="0/3 nodes are available"),
    ]
    return status.summarize("mnist", "default", [job], pods)


def test_a_status_document_carries_every_worker_and_matches_the_schema() -> None:
    document = output.job_document(failed_worker_status())

    validate(document)
    assert document["status"]["state"] == "Failed"
    assert document["status"]["condition"] == "Failed: PodFailurePolicy: exit 78"
    workers = document["status"]["workers"]
    assert [(w["index"], w["phase"], w["exitCode"]) for w in workers] == [
        (0, "Failed", 78),
        (1, "Pending", None),
    ]
    assert workers[1]["reason"] == "Unschedulable: 0/3 nodes are available"
    assert document["spec"] == {"layout": "indexed", "workers": 2}


def test_a_plain_jobs_status_document_counts_its_restarts_in_place_from_the_chiefs_log() -> None:
    killed = "Epoch 2/5 (the program was killed by SIGKILL)"
    chief = job_progress.from_chief_log(
        "\n".join(
            [
                contract.restart_line(1, [(1, killed)]),
                contract.restart_line(2, [(1, killed)]),
            ]
        )
    )

    document = output.job_document(
        job_progress.with_restarts_in_place(failed_worker_status(), chief)
    )

    validate(document)
    assert document["status"]["restartsInPlace"] == 2
    assert document["status"]["lastRestartInPlace"] == (
        "restart in place 2: worker 1 was killed by SIGKILL: Epoch 2/5"
    )
    assert document["status"]["restarts"] == 0  # no pod was replaced


def test_a_status_document_whose_chiefs_log_was_not_read_says_null_restarts_in_place() -> None:
    document = output.job_document(failed_worker_status())

    validate(document)
    assert document["status"]["restartsInPlace"] is None
    assert document["status"]["lastRestartInPlace"] is None


def test_a_list_item_has_the_jobs_active_count_and_no_worker_rows() -> None:
    summaries = status.overviews(
        [
            with_active(indexed_job(), 2),
            *job_objects(metadata__name="pw", spec__layout="per-worker")[2:],
        ]
    )

    document = output.job_list_document(summaries)

    validate(document)
    assert [i["metadata"]["name"] for i in document["items"]] == ["mnist", "pw"]
    mnist = document["items"][0]
    assert mnist["status"]["running"] == 2
    assert "workers" not in mnist["status"] and "restarts" not in mnist["status"]
    assert mnist["metadata"]["labels"]["tflaunch.dev/job-name"] == "mnist"


def test_the_labels_of_a_per_worker_job_are_those_all_its_jobs_share() -> None:
    jobs = job_objects(metadata__name="pw", spec__layout="per-worker")[2:]

    (summary,) = status.overviews(jobs)

    assert "tflaunch.dev/worker-index" not in summary.labels
    assert summary.labels["app.kubernetes.io/managed-by"] == "tflaunch"


def test_an_empty_list_is_an_empty_items_array() -> None:
    document = output.job_list_document([])

    validate(document)
    assert document["items"] == []


def test_a_doctor_report_counts_the_failed_checks_and_matches_the_schema() -> None:
    checks = [
        doctor.ok("API server", "reachable"),
        doctor.fail("GPU nodes", "no node has nvidia.com/gpu", "install the device plugin"),
        doctor.skip("ResourceQuota", "not checked: forbidden"),
    ]

    document = output.doctor_document(checks, "ml", None)

    validate(document)
    assert document["failed"] == 1
    assert document["checks"][1]["fix"] == "install the device plugin"


def test_a_document_that_drifts_from_the_schema_is_refused() -> None:
    # The schema is strict (no extra fields): a renamed field must fail the validation.
    document = output.job_document(failed_worker_status())
    document["status"]["phase"] = document["status"].pop("state")

    with pytest.raises(jsonschema.ValidationError):
        validate(document)


def test_yaml_and_json_are_the_same_document() -> None:
    document = output.job_document(failed_worker_status())

    as_json = json.loads(output.dump(document, "json"))
    as_yaml = yaml.safe_load(output.dump(document, "yaml"))

    assert as_json == as_yaml == document


def test_timestamps_are_utc_with_a_z() -> None:
    moment = datetime.datetime(
        2026, 5, 1, 14, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
    )

    assert output.timestamp(moment) == "2026-05-01T12:00:00Z"
    assert output.timestamp(None) is None


def test_wide_status_adds_the_exit_code_and_when_it_finished() -> None:
    text = output.status_text(failed_worker_status(), NOW, wide=True)

    lines = text.splitlines()
    assert lines[1].split()[:9] == [
        "WORKER", "POD", "PHASE", "NODE", "RESTARTS", "AGE", "EXIT", "CODE", "FINISHED"
    ]  # fmt: skip
    worker0 = lines[2].split()
    assert worker0[6] == "78"
    assert worker0[7].endswith("s") and worker0[8] == "ago"
    assert "jobs: mnist-worker" in lines


def test_the_default_status_table_has_no_wide_columns() -> None:
    text = output.status_text(failed_worker_status(), NOW)

    assert "EXIT CODE" not in text
    assert text.splitlines()[0].startswith("job mnist in namespace default: Failed, 0/2")


def test_wide_list_adds_running_and_the_condition() -> None:
    summaries = status.overviews([with_condition(indexed_job(), "Suspended")])

    text = output.list_text(summaries, NOW, wide=True, all_namespaces=True)

    header, row = (line.split(None, 6) for line in text.splitlines())
    assert header == [
        "NAMESPACE",
        "NAME",
        "LAYOUT",
        "WORKERS",
        "STATE",
        "AGE",
        "RUNNING   CONDITION",
    ]
    assert row[:5] == ["default", "mnist", "indexed", "2", "Suspended"]
    assert row[6].startswith("0") and "Suspended" in row[6]


def test_name_output_is_one_job_name_a_line() -> None:
    summaries = status.overviews([indexed_job(), *job_objects(metadata__name="b")[2:]])

    assert output.render(summaries, "name", NOW, single=False) == "b\nmnist"


def test_the_watch_printer_prints_a_row_only_when_more_than_its_age_changed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    printer = watching.Printer(None, ["NAME", "STATE", "AGE"])

    printer.rows({"a": ["a", "Pending", "1s"], "bb": ["bb", "Pending", "1s"]})
    printer.rows({"a": ["a", "Pending", "2s"], "bb": ["bb", "Pending", "2s"]})
    printer.rows({"a": ["a", "Running", "3s"], "bb": ["bb", "Pending", "3s"]})

    assert capsys.readouterr().out.splitlines() == [
        "NAME   STATE     AGE",
        "a      Pending   1s",
        "bb     Pending   1s",
        "a      Running   3s",
    ]


def test_the_watch_printer_separates_yaml_documents(capsys: pytest.CaptureFixture[str]) -> None:
    printer = watching.Printer("yaml")

    printer.text("a", "state: Pending")
    printer.text("a", "state: Pending")
    printer.text("a", "state: Running")

    assert capsys.readouterr().out == "state: Pending\n---\nstate: Running\n"
