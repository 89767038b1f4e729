"""Which Jobs lack pods they should run, and why, in the server's words (the pure reading
behind `wait`'s warning; the real FailedCreate is proven in tests/e2e/test_wait_blocked.py)."""

from __future__ import annotations

from typing import Any

from launcher.cluster import stalls

QUOTA = 'pods "m-worker-1-x" is forbidden: exceeded quota: q, requested: pods=1'


def job(name: str = "m-worker", **spec: Any) -> dict[str, Any]:
    body = {"parallelism": 2, "completions": 2, **spec}
    status_ = body.pop("status", {})
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": body, "status": status_}


def pod(owner: dict[str, Any], phase: str = "Running") -> dict[str, Any]:
    reference = {"kind": "Job", "uid": owner["metadata"]["uid"]}
    return {"metadata": {"ownerReferences": [reference]}, "status": {"phase": phase}}


def event(reason: str, message: str, kind: str = "Warning") -> dict[str, Any]:
    return {"type": kind, "reason": reason, "message": message}


def test_a_job_with_fewer_live_pods_than_parallelism_falls_short() -> None:
    j = job()
    assert stalls.missing_pods([j], [pod(j), pod(j, "Failed")]) == (
        stalls.Shortfall("m-worker", want=2, have=1, failed=0),
    )


def test_suspended_finished_and_nearly_done_jobs_do_not_fall_short() -> None:
    done = job(status={"conditions": [{"type": "Complete", "status": "True"}]})
    nearly = job(status={"succeeded": 1})
    assert stalls.missing_pods([job(suspend=True), done], []) == ()
    assert stalls.missing_pods([nearly], [pod(nearly)]) == ()


def test_the_cause_is_the_newest_failed_create_event() -> None:
    events = [event("FailedCreate", "old"), event("SuccessfulCreate", "x", "Normal")]
    events.append(event("FailedCreate", QUOTA))
    assert stalls.creation_blocked_by(job(), events) == f"FailedCreate: {QUOTA}"
    assert stalls.creation_blocked_by(job(), [event("SuccessfulCreate", "x", "Normal")]) is None


def test_the_warning_names_the_job_the_counts_and_the_cause() -> None:
    shortfall = stalls.Shortfall("m-worker", want=2, have=1, failed=0)
    text = stalls.missing_warning(shortfall, 120, f"FailedCreate: {QUOTA}")
    assert "Job m-worker has 1 of 2 worker pods" in text and "exceeded quota: q" in text
    assert "\n" not in text


def test_the_warning_waits_a_little_for_the_servers_reason(monkeypatch: Any) -> None:
    """The Job controller's FailedCreate event can lag on a busy API server: the warning
    waits up to REASON_GRACE_SECONDS past the threshold for it, then warns without it."""
    from launcher.cli import wait_cmd
    from launcher.cluster.find import JobObjects

    clock = [100.0]
    monkeypatch.setattr(wait_cmd.time, "monotonic", lambda: clock[0])
    events: list[dict[str, Any]] = []
    missing = wait_cmd._MissingPods(cluster=None, namespace="ns", threshold=2)  # type: ignore[arg-type]
    monkeypatch.setattr(missing, "_events", lambda name: events)
    j = job()
    objects = JobObjects("m", "ns", jobs=(j,), pods=(pod(j),))

    assert missing.warnings(objects) == []  # short from now on
    clock[0] += 3  # past the threshold, no reason yet: keep waiting for it
    assert missing.warnings(objects) == []
    events.append(event("FailedCreate", QUOTA))
    clock[0] += 1
    [warning] = missing.warnings(objects)
    assert "exceeded quota" in warning

    other = wait_cmd._MissingPods(cluster=None, namespace="ns", threshold=2)  # type: ignore[arg-type]
    monkeypatch.setattr(other, "_events", lambda name: [])
    assert other.warnings(objects) == []
    clock[0] += 2 + wait_cmd.REASON_GRACE_SECONDS + 1  # no reason ever: warn without one
    assert len(other.warnings(objects)) == 1
