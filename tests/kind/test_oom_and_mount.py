"""Two faults of real pods that used to loop or wait out the timeout (issue 40):

- a worker over its container's memory limit: the kernel's OOM killer ends its program, the
  kubelet says OOMKilled; `wait` names it with the limit and the step the chief reached,
  and once the same worker is OOM-killed again at the same point it stops the group (the
  Job's backoffLimit set to 0) and ends with exit 3 instead of restarting until the budget
  is spent (without `wait`, the Job's own budget ends it after exactly spec.backoffLimit
  group restarts);
- a checkpoint claim bound to a hostPath PersistentVolume of `type: Directory` on a path
  that does not exist: the pods stay in ContainerCreating and only the kubelet's FailedMount
  event says why; `wait` ends with exit 5 after never_starts.GRACE_SECONDS naming it.

On the kind rig: its nodes run cgroup v1 (hack/kind.sh), so runc inside a node enforces
limits.memory. The times and counts are printed for docs/testing.md, never asserted.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import ROOT, eventually
from tests.kind.conftest import Kind, host_path_claim, mnist_spec, own_program_spec

pytestmark = pytest.mark.timeout(900)  # OOM kills and restarts: minutes
GROW = ROOT / "tests" / "data" / "oom" / "grow_on_worker_1.py"


def oom_spec(path: Path, namespace: str, image: str, backoff_limit: int) -> Path:
    """GROW's job: 2 workers with a 200Mi memory limit."""
    spec = own_program_spec(path, namespace, image, "oom")
    document = yaml.safe_load(spec.read_text())
    document["spec"]["resources"] = {
        "requests": {"cpu": "100m", "memory": "100Mi"},
        "limits": {"cpu": "1", "memory": "200Mi"},
    }
    document["spec"]["backoffLimit"] = backoff_limit
    document["spec"]["restart"] = "recreate"  # the Job's own budget and failed pods
    spec.write_text(yaml.safe_dump(document))
    return spec


def terminated_reasons(kind: Kind, namespace: str) -> list[tuple[str, str]]:
    pods = kind.get("pods", "-n", namespace)["items"]
    return [
        (p["metadata"]["name"], s["state"].get("terminated", {}).get("reason"))
        for p in pods
        for s in p["status"].get("containerStatuses", [])
    ]


def test_a_worker_oom_killed_twice_at_the_same_step_is_named_and_not_looped_on(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    spec = oom_spec(tmp_path / "job.yaml", namespace, kind.trainer, backoff_limit=3)

    started = time.monotonic()
    run = kind.tflaunch(
        "submit", str(spec), "--script", str(GROW), "--workers", "2", "--wait",
        "--timeout", "10m", timeout=700,
    )  # fmt: skip
    took = time.monotonic() - started

    restarted = [line for line in run.err.splitlines() if "restarted (" in line]
    print(f"OOM: wait ended with {run.code} after {took:.0f}s; restart lines: {restarted}")
    assert run.code == 3, run
    error = run.err.strip().splitlines()[-1]
    assert "OOMKilledAgain: worker 1 was OOMKilled" in error, run.err
    assert "at its memory limit 200Mi, at step 5" in error, run.err
    assert "raise spec.resources.limits.memory" in error, run.err
    assert "OOM-killed again at step 5, as before at step 5" in error, run.err
    assert any("worker 1 restarted (1 so far): it was OOMKilled" in line for line in restarted)
    job = kind.get("jobs", "oom-worker", "-n", namespace)
    assert job["spec"]["backoffLimit"] == 0, job["spec"]
    ends = terminated_reasons(kind, namespace)
    print(f"OOM: pods {ends}; Job status {job.get('status')}")
    # Stopped at the second OOM kill (backoffLimit 0, above), never a third. When the Job
    # fails, its controller deletes the pods whose phase the kubelet has not set to Failed
    # yet (their container has ended), so one OOMKilled pod may be gone: one or two.
    oom_killed = sum(reason == "OOMKilled" for _, reason in ends)
    assert 1 <= oom_killed <= 2, ends
    status = kind.tflaunch("status", "oom", "-n", namespace, "-o", "json")
    assert "OOMKilledAgain" in status.out, status


def test_without_wait_the_oom_killed_group_restarts_exactly_backoff_limit_times(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    """Nobody waits, so nothing stops the loop: the indexed Job's own budget (backoffLimit
    x workers pod failures, both workers' pods failing in each attempt) ends it after
    spec.backoffLimit group restarts, as the operator's count would."""
    spec = oom_spec(tmp_path / "job.yaml", namespace, kind.trainer, backoff_limit=2)
    started = time.monotonic()
    run = kind.tflaunch("submit", str(spec), "--script", str(GROW), "--workers", "2")
    assert run.code == 0, run

    def failed() -> bool:
        job = kind.get("jobs", "oom-worker", "-n", namespace)
        return any(
            c["type"] in ("Failed", "FailureTarget") and c["status"] == "True"
            for c in job.get("status", {}).get("conditions", [])
        )

    eventually(failed, timeout=600, interval=2, what="the Job to spend its backoffLimit")
    job = kind.get("jobs", "oom-worker", "-n", namespace)
    ends = terminated_reasons(kind, namespace)
    print(f"budget: the Job failed after {time.monotonic() - started:.0f}s; pods {ends}; "
          f"Job status {job.get('status')}")  # fmt: skip
    # Three attempts (2 restarts + the last), each failing both workers: the Job fails at its
    # 5th failure (backoffLimit 2 x 2 workers = 4 allowed), the 6th its peer's; a fourth
    # attempt would make it 7 or more. The Job controller's count is the record: the pods it
    # still counted as active when the Job failed are deleted.
    assert job["status"]["failed"] in (5, 6), job["status"]
    assert "OOMKilled" in {reason for _, reason in ends}, ends


@pytest.fixture
def missing_directory_claim(kind: Kind, namespace: str) -> Iterator[str]:
    """A claim `checkpoints` bound to a hostPath PersistentVolume whose directory is not on
    the node (`type: Directory` makes the kubelet check it)."""
    name = f"missing-{uuid.uuid4().hex[:5]}"
    host_path_claim(kind, namespace, name, f"/nonexistent/{name}")
    yield name
    kind.kubectl("delete", "pv", name, "--wait=false", check=False)


@pytest.mark.timeout(600)
def test_a_volume_that_cannot_mount_ends_the_wait_with_exit_5_naming_it(
    kind: Kind,
    namespace: str,
    missing_directory_claim: str,
    tmp_path: Path,
) -> None:
    spec = mnist_spec(
        tmp_path / "mnist.yaml", "mnist", namespace, kind.trainer,
        checkpoint={"claimName": "checkpoints"},
    )  # fmt: skip

    started = time.monotonic()
    run = kind.tflaunch(
        "submit", str(spec), "--workers", "2", "--wait", "--timeout", "5m", timeout=400
    )
    took = time.monotonic() - started

    print(f"FailedMount: wait ended with {run.code} after {took:.0f}s")
    assert run.code == 5, run
    error = run.err.strip().splitlines()[-1]
    assert "will never start: volume" in error and "FailedMount" in error, run.err
    assert missing_directory_claim in error, run.err  # the kubelet names the PV's volume
    assert "spec.checkpoint.claimName" in error, run.err
    status = kind.tflaunch("status", "mnist", "-n", namespace, "-o", "json")
    reasons = [w.get("reason") for w in json.loads(status.out)["status"]["workers"]]
    assert any("FailedMount" in (r or "") for r in reasons), status.out
