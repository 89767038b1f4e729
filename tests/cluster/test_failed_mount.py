"""A volume that cannot mount (issue 40): the pod stays in ContainerCreating and only the
kubelet's FailedMount (or FailedAttachVolume) event on the pod says why. `wait` reads it as a
dead end, names the worker, the volume and the kubelet's words with the fix, and ends with
exit 5 after the same grace as the other never-start causes; `status` shows it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from launcher.core import never_starts
from launcher.core.errors import ExitStatus
from launcher.core.never_starts import dead_end
from tests.cluster.conftest import Result
from tests.cluster.fakeapi import FakeKubernetes
from tests.cluster.objects import pod_for

Tflaunch = Callable[..., Result]
NOT_A_DIRECTORY = (
    'MountVolume.SetUp failed for volume "pv-missing" : hostPath type check failed: '
    "/nosuch/checkpoints is not a directory"
)
CHECKPOINTS = (
    "Unable to attach or mount volumes: unmounted volumes=[checkpoints], unattached "
    "volumes=[tmp checkpoints], failed to process volumes=[]: timed out waiting for the condition"
)


def pod_event(pod: str, reason: str, message: str, kind: str = "Warning") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod}.{reason.lower()}", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": "default"},
        "type": kind,
        "reason": reason,
        "message": message,
    }


@pytest.mark.parametrize(
    "reason, message, culprit, fix",
    [
        ("FailedMount", NOT_A_DIRECTORY, 'volume "pv-missing"', "spec.checkpoint.claimName"),
        ("FailedMount", CHECKPOINTS, 'volume "checkpoints"', "spec.checkpoint.claimName"),
        (
            "FailedMount",
            'MountVolume.SetUp failed for volume "script" : configmap "m" not found',
            'volume "script"',
            "resubmit the job",
        ),
        (
            "FailedAttachVolume",
            'AttachVolume.Attach failed for volume "pvc-1" : timed out',
            'volume "pvc-1"',
            "spec.checkpoint.claimName",
        ),
        ("FailedMount", "MountVolume.SetUp failed", "a volume", "kubectl describe pod"),
    ],
)
def test_a_volume_that_does_not_mount_is_a_dead_end_naming_it(
    reason: str, message: str, culprit: str, fix: str
) -> None:
    end = dead_end(reason, message)
    assert end is not None and end.culprit == culprit and fix in end.fix


def test_the_fixes_name_only_fields_the_spec_has() -> None:
    """The spec has no `volumes`: the claim's fix names spec.checkpoint.claimName alone."""
    claim = dead_end("Unschedulable", 'persistentvolumeclaim "ckpt" not found')
    secret = dead_end("CreateContainerConfigError", 'secret "token" not found')
    assert claim is not None and secret is not None
    assert "spec.volumes" not in claim.fix + secret.fix
    assert claim.fix.endswith("correct spec.checkpoint.claimName")


def test_a_failed_mount_ends_the_wait_with_exit_5_naming_worker_volume_and_message(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(never_starts, "GRACE_SECONDS", 0.3)
    fake.put(pod_for(job, 0, phase="Pending", waiting=("ContainerCreating", "")))
    fake.put(pod_for(job, 1, phase="Pending", waiting=("ContainerCreating", "")))
    fake.put(pod_event("mnist-worker-1-a0", "FailedMount", CHECKPOINTS))
    fake.put(pod_event("mnist-worker-0-a0", "Scheduled", "assigned", kind="Normal"))

    result = tflaunch("wait", "mnist", "--timeout", "60", "--pending-warning", "0")

    assert result.code == ExitStatus.NEVER_STARTS == 5, result.err
    error = result.err.splitlines()[-1]
    assert error.startswith(
        'tflaunch: error: job mnist cannot start: worker 1 will never start: volume "checkpoints" '
        f"(FailedMount: {CHECKPOINTS}); the checkpoint volume (spec.checkpoint.claimName) "
        "cannot be mounted on the node"
    ), error


def test_status_shows_the_failed_mount_of_a_creating_pod(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any]
) -> None:
    fake.put(pod_for(job, 0, phase="Pending", waiting=("ContainerCreating", "")))
    fake.put(pod_event("mnist-worker-0-a0", "FailedMount", NOT_A_DIRECTORY))

    result = tflaunch("status", "mnist")

    assert "FailedMount: MountVolume.SetUp failed for volume" in result.out, result.out
