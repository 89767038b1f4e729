"""kubectl's output flags on the real control plane: `-o json|yaml|name`, `list -l`, `-w`.

The JSON is checked against docs/output-schema.json, the documented interface, and against
what the API server itself stored (`kubectl get`)."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.e2e.conftest import ROOT, ControlPlane, eventually, pod_hooks, write_spec

pytestmark = pytest.mark.e2e

SCHEMA = json.loads((ROOT / "docs" / "output-schema.json").read_text())


def valid(document: Any) -> Any:
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    return document


class Lines:
    """A running command's stdout, line by line, read in a thread (so a test can wait for a
    line with a deadline instead of blocking on the pipe)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        assert proc.stdout is not None
        stdout = proc.stdout
        threading.Thread(target=self._pump, args=(stdout,), daemon=True).start()

    def _pump(self, stdout: Any) -> None:
        for line in stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def expect(self, text: str, timeout: float = 90) -> str:
        """The first line from now on that contains `text`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r}; got:\n" + "\n".join(self.seen))


def running_job(cp: ControlPlane, tmp_path: Path, name: str, namespace: str, **spec: Any) -> None:
    path = write_spec(
        tmp_path / f"{name}.yaml", name, namespace, hooks=pod_hooks(run_for="forever"), **spec
    )
    assert (run := cp.tflaunch("submit", str(path))).code == 0, run


def test_list_selects_by_label_and_prints_json_of_the_documented_shape(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    running_job(cp, tmp_path, "ml", namespace, labels={"team": "ml"})
    running_job(cp, tmp_path, "web", namespace, labels={"team": "web"})
    cp.wait_active(namespace, "ml-worker")

    listed = cp.tflaunch("list", "-n", namespace, "-l", "team=ml", "-o", "json")

    assert listed.code == 0, listed
    document = valid(json.loads(listed.out))
    assert document["kind"] == "JobList"
    (item,) = document["items"]
    assert item["metadata"]["name"] == "ml"
    assert item["metadata"]["labels"]["team"] == "ml"
    stored = cp.get("job", "ml-worker", "-n", namespace)
    assert item["status"]["running"] == stored["status"]["active"] == 2
    assert item["metadata"]["creationTimestamp"] == stored["metadata"]["creationTimestamp"]
    assert item["status"]["jobs"] == ["ml-worker"]

    both = cp.tflaunch("list", "-n", namespace, "-l", "team in (ml,web)", "-o", "name")
    assert (both.code, both.out.split()) == (0, ["ml", "web"]), both
    none = cp.tflaunch("list", "-n", namespace, "-l", "team=nobody", "-o", "json")
    assert valid(json.loads(none.out))["items"] == [], none


def test_a_bad_selector_is_one_line_naming_the_flag(
    control_plane: ControlPlane, namespace: str
) -> None:
    run = control_plane.tflaunch("list", "-n", namespace, "-l", "team==,=x")

    assert run.code == 2, run
    assert run.err.count("\n") == 1 and "Traceback" not in run.err, run
    assert "-l/--selector" in run.err, run


def test_status_yaml_is_what_the_server_stored(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    running_job(cp, tmp_path, "st", namespace)
    cp.wait_active(namespace, "st-worker")

    def both_running() -> Any:
        run = cp.tflaunch("status", "st", "-n", namespace, "-o", "yaml")
        assert run.code == 0, run
        document = yaml.safe_load(run.out)
        return document if document["status"]["running"] == 2 else None

    document = valid(eventually(both_running, what="both workers Running in status -o yaml"))
    pods = cp.get("pods", "-n", namespace, "-l", "tflaunch.dev/job-name=st")["items"]
    by_index = {
        int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p for p in pods
    }
    for worker in document["status"]["workers"]:
        pod = by_index[worker["index"]]
        assert worker["pod"] == pod["metadata"]["name"]
        assert worker["node"] == pod["spec"]["nodeName"]
        assert worker["phase"] == pod["status"]["phase"] == "Running"
    assert document["status"]["state"] == "Running"


def test_wait_prints_the_final_status_as_json_and_doctor_its_checks(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "done", namespace, hooks=pod_hooks(run_for="2s"))
    assert (run := cp.tflaunch("submit", str(spec))).code == 0, run

    waited = cp.tflaunch("wait", "done", "-n", namespace, "--timeout", "120", "-o", "json")

    assert waited.code == 0, waited
    document = valid(json.loads(waited.out))
    assert document["status"]["state"] == "Succeeded"
    assert [w["exitCode"] for w in document["status"]["workers"]] == [0, 0]
    assert "succeeded" in waited.err  # the progress stays on stderr

    doctor = cp.tflaunch("doctor", "done", "-n", namespace, "-o", "json")
    report = valid(json.loads(doctor.out))
    assert report["kind"] == "DoctorReport"
    assert report["metadata"] == {"name": "done", "namespace": namespace}
    assert report["checks"][0]["name"] == "API server"
    assert doctor.code == (1 if report["failed"] else 0), doctor


def test_wait_that_times_out_still_prints_the_status_and_exits_4(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    running_job(cp, tmp_path, "long", namespace)

    waited = cp.tflaunch("wait", "long", "-n", namespace, "--timeout", "3", "-o", "name")

    assert (waited.code, waited.out) == (4, "long\n"), waited


def test_status_watch_prints_each_change_and_stops_on_ctrl_c(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    running_job(cp, tmp_path, "held", namespace, suspend=True)
    proc = cp.popen_tflaunch("status", "held", "-n", namespace, "-w")
    try:
        lines = Lines(proc)
        lines.expect("job held in namespace")
        lines.expect("WORKER")
        lines.expect("Missing")  # suspended: no pods yet

        cp.kubectl(
            "patch", "job", "held-worker", "-n", namespace, "-p", '{"spec":{"suspend":false}}'
        )

        assert lines.expect("Running").split()[0] in ("0", "1")
        lines.expect("job held: Running")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read()


def test_status_watch_ends_by_itself_at_its_timeout(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    running_job(cp, tmp_path, "w", namespace)

    run = cp.tflaunch("status", "w", "-n", namespace, "-w", "--timeout", "3s", "-o", "json")

    assert run.code == 0, run
    first = json.JSONDecoder().raw_decode(run.out)[0]
    assert valid(first)["metadata"]["name"] == "w"


def test_list_watch_adds_a_row_for_a_new_job(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    proc = cp.popen_tflaunch("list", "-n", namespace, "-w")
    try:
        lines = Lines(proc)
        lines.expect("NAME")

        running_job(cp, tmp_path, "late", namespace)

        assert lines.expect("late").split()[:2] == ["late", "indexed"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("flag", ["--dry-run", "--dry-run=server"])
def test_a_server_dry_run_is_checked_by_the_api_server_and_stores_nothing(
    control_plane: ControlPlane, namespace: str, tmp_path: Path, flag: str
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "dry", namespace)

    run = cp.tflaunch("submit", flag, str(spec))

    assert run.code == 0, run
    assert "job.batch/dry-worker created (server dry run)" in run.out.splitlines(), run
    stored = cp.get("jobs,services,networkpolicies,pods", "-n", namespace)
    assert stored["items"] == []
    elsewhere = write_spec(tmp_path / "missing.yaml", "dry", f"{namespace}-missing")
    refused = cp.tflaunch("submit", flag, str(elsewhere))
    assert refused.code != 0 and "does not exist" in refused.err, refused


def test_a_client_dry_run_needs_no_cluster(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    spec = write_spec(tmp_path / "job.yaml", "dry", f"{namespace}-missing")
    nowhere = {"KUBECONFIG": str(tmp_path / "no-such-kubeconfig")}

    run = cp.tflaunch("submit", "--dry-run=client", str(spec), env=nowhere)

    assert run.code == 0, run
    assert "job.batch/dry-worker rendered (client dry run)" in run.out.splitlines(), run
    assert cp.get("jobs", "-A", "-l", "tflaunch.dev/job-name=dry")["items"] == []


def test_job_names_complete_from_the_cluster(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = control_plane
    for name in ("alpha", "alps", "beta"):
        path = write_spec(tmp_path / f"{name}.yaml", name, namespace, suspend=True)
        assert (run := cp.tflaunch("submit", str(path))).code == 0, run
    words = f"tflaunch status -n {namespace} al"
    protocol = {"COMP_WORDS": words, "COMP_CWORD": "4", "_TFLAUNCH_COMPLETE": "bash_complete"}

    run = cp.tflaunch(env={**protocol, "TFLAUNCH_COMPLETION_TIMEOUT": "60"})

    assert run.code == 0, run
    assert run.out.split() == ["plain,alpha", "plain,alps"], run
