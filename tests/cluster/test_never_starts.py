"""Workers that will never start (issue 40, item 1): an absent image, an invalid image name,
a missing Secret or ConfigMap. `wait` names the worker, the object and the kubelet's words,
says the fix, and ends with exit 5 once the reason has lasted `never_starts.GRACE_SECONDS`;
the capacity advice is only for pods the scheduler could not place."""

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
NEVER_PULL = 'Container image "nosuch:1" is not present with pull policy of Never'
NOT_FOUND = (
    'failed to pull and unpack image "docker.io/library/nosuch:1": failed to resolve '
    'reference "docker.io/library/nosuch:1": docker.io/library/nosuch:1: not found'
)
UNREACHABLE = 'failed to pull image "registry.local:5000/t:1": dial tcp 10.0.0.9:5000: i/o timeout'


@pytest.mark.parametrize(
    "reason, message, culprit",
    [
        ("ErrImageNeverPull", NEVER_PULL, 'image "nosuch:1"'),
        ("InvalidImageName", 'Failed to apply default image tag "Bad:Name": ...', "the image"),
        ("ErrImagePull", NOT_FOUND, 'image "docker.io/library/nosuch:1"'),
        ("ImagePullBackOff", f'Back-off pulling image "nosuch:1": {NOT_FOUND}', 'image "nosuch:1"'),
        ("CreateContainerConfigError", 'secret "token" not found', 'Secret "token"'),
        ("CreateContainerConfigError", 'configmap "cfg" not found', 'ConfigMap "cfg"'),
    ],
)
def test_a_dead_end_names_the_object_at_fault(reason: str, message: str, culprit: str) -> None:
    end = dead_end(reason, message)
    assert end is not None and end.culprit == culprit and end.reason == reason


@pytest.mark.parametrize(
    "reason, message",
    [
        ("ErrImagePull", UNREACHABLE),  # the registry may come back
        ("ImagePullBackOff", 'Back-off pulling image "t:1"'),
        ("ContainerCreating", ""),
        ("CreateContainerConfigError", "couldn't find key token in Secret default/x"),
    ],
)
def test_what_may_pass_is_no_dead_end(reason: str, message: str) -> None:
    assert dead_end(reason, message) is None


Waiting = Callable[[str, str, str], Result]


@pytest.fixture
def wait_on_worker_1(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> Waiting:
    """`wait --timeout T` with worker 0 running and worker 1's container waiting on
    (reason, message); a short grace so that the test does not wait 30 s."""

    def run(reason: str, message: str, timeout: str) -> Result:
        monkeypatch.setattr(never_starts, "GRACE_SECONDS", 0.3)
        fake.put(pod_for(job, 0, age=30))
        fake.put(pod_for(job, 1, phase="Pending", waiting=(reason, message)))
        return tflaunch("wait", "mnist", "--timeout", timeout, "--pending-warning", "0")

    return run


def test_an_image_never_present_ends_the_wait_with_exit_5_naming_worker_image_and_fix(
    wait_on_worker_1: Waiting,
) -> None:
    result = wait_on_worker_1("ErrImageNeverPull", NEVER_PULL, "60")

    assert result.code == ExitStatus.NEVER_STARTS == 5
    error = result.err.splitlines()[-1]
    assert error.startswith(
        'tflaunch: error: job mnist cannot start: worker 1 will never start: image "nosuch:1" '
        f"(ErrImageNeverPull: {NEVER_PULL}); it is not on the node"
    ), result.err
    assert "tflaunch delete mnist -n default" in error
    assert "lacks room" not in result.err and "gang scheduling" not in result.err


def test_a_pull_that_only_timed_out_keeps_waiting(wait_on_worker_1: Waiting) -> None:
    result = wait_on_worker_1("ErrImagePull", UNREACHABLE, "1")

    assert result.code == ExitStatus.TIMEOUT
    (warning,) = [line for line in result.err.splitlines() if line.startswith("warning:")]
    assert "kubectl describe pod" in warning and "lacks room" not in warning
