"""Workers that will never start (issue 40, item 1): an absent image, an invalid image name,
a missing Secret or ConfigMap. `wait` names the worker, the object and the kubelet's words,
says the fix, and ends with exit 5 once the reason has lasted `never_starts.GRACE_SECONDS`;
the capacity advice is only for pods the scheduler could not place. A registry that does not
answer (issue 34) is given `never_starts.UNREACHABLE_GRACE_SECONDS` before the same exit."""

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
# containerd 2.4's own words on a kind node (hack/kind.sh), each past status's 160-character
# cut of a reason: nothing listens on the port; a tag the registry lacks; no pull secret.
REFUSED = (
    'failed to pull and unpack image "localhost:5999/tflaunch-trainer:0.1.0-cpu": failed to '
    'resolve reference "localhost:5999/tflaunch-trainer:0.1.0-cpu": failed to do request: Head '
    '"https://localhost:5999/v2/tflaunch-trainer/manifests/0.1.0-cpu": dial tcp [::1]:5999: '
    "connect: connection refused"
)
WRONG_TAG = (
    'Back-off pulling image "localhost:5001/tflaunch-trainer:nosuch": ErrImagePull: rpc error: '
    'code = NotFound desc = failed to pull and unpack image "localhost:5001/tflaunch-trainer:'
    'nosuch": failed to resolve reference "localhost:5001/tflaunch-trainer:nosuch": '
    "localhost:5001/tflaunch-trainer:nosuch: not found"
)
NO_CREDENTIALS = (
    'Back-off pulling image "localhost:5002/tflaunch-trainer:0.1.0-cpu": ErrImagePull: failed '
    'to pull and unpack image "localhost:5002/tflaunch-trainer:0.1.0-cpu": failed to resolve '
    'reference "localhost:5002/tflaunch-trainer:0.1.0-cpu": pull access denied, repository '
    "does not exist or may require authorization: authorization failed: no basic auth "
    "credentials"
)


@pytest.mark.parametrize(
    "reason, message, culprit",
    [
        ("ErrImageNeverPull", NEVER_PULL, 'image "nosuch:1"'),
        ("InvalidImageName", 'Failed to apply default image tag "Bad:Name": ...', "the image"),
        ("ErrImagePull", NOT_FOUND, 'image "docker.io/library/nosuch:1"'),
        ("ImagePullBackOff", f'Back-off pulling image "nosuch:1": {NOT_FOUND}', 'image "nosuch:1"'),
        ("ImagePullBackOff", WRONG_TAG, 'image "localhost:5001/tflaunch-trainer:nosuch"'),
        ("ImagePullBackOff", NO_CREDENTIALS, 'image "localhost:5002/tflaunch-trainer:0.1.0-cpu"'),
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
        ("ImagePullBackOff", 'Back-off pulling image "t:1"'),
        ("ContainerCreating", ""),
        ("CreateContainerConfigError", "couldn't find key token in Secret default/x"),
    ],
)
def test_what_may_pass_is_no_dead_end(reason: str, message: str) -> None:
    assert dead_end(reason, message) is None


@pytest.mark.parametrize(
    "reason, message, registry",
    [
        ("ErrImagePull", UNREACHABLE, "registry.local:5000"),
        ("ErrImagePull", REFUSED, "localhost:5999"),
        (
            "ImagePullBackOff",
            f'Back-off pulling image "localhost:5999/t:1": {REFUSED}',
            "localhost:5999",
        ),
    ],
)
def test_an_unreachable_registry_is_named_and_given_longer(
    reason: str, message: str, registry: str
) -> None:
    end = dead_end(reason, message)

    assert end is not None and end.unreachable, end
    assert end.fix.startswith(f"the registry {registry} does not answer"), end.fix
    assert never_starts.grace_seconds(end) == never_starts.UNREACHABLE_GRACE_SECONDS
    assert never_starts.UNREACHABLE_GRACE_SECONDS > never_starts.GRACE_SECONDS
    assert "cannot pull its image" in never_starts.sentence(1, end, message)


@pytest.mark.parametrize(
    "image, registry",
    [
        ("localhost:5001/tflaunch-trainer:0.1.0-cpu", "localhost:5001"),
        ("ghcr.io/org/t:1", "ghcr.io"),
        ("localhost/t:1", "localhost"),
        ("org/t:1", "docker.io"),
        ("t:1", "docker.io"),
    ],
)
def test_the_registry_of_an_image(image: str, registry: str) -> None:
    assert never_starts.registry_of(image) == registry


Waiting = Callable[..., Result]


@pytest.fixture
def wait_on_worker_1(
    tflaunch: Tflaunch, fake: FakeKubernetes, job: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> Waiting:
    """`wait --timeout T` with worker 0 running and worker 1's container waiting on
    (reason, message); a short grace so that the test does not wait 30 s (an unreachable
    registry's, `unreachable_grace`, long unless a test shortens it)."""

    def run(reason: str, message: str, timeout: str, unreachable_grace: float = 600.0) -> Result:
        monkeypatch.setattr(never_starts, "GRACE_SECONDS", 0.3)
        monkeypatch.setattr(never_starts, "UNREACHABLE_GRACE_SECONDS", unreachable_grace)
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


@pytest.mark.parametrize(
    "message, fix",
    [
        (WRONG_TAG, "the registry has no such image or refused it: check the tag in spec.image"),
        (NO_CREDENTIALS, "and for a private registry spec.imagePullSecrets"),
    ],
)
def test_a_pull_refused_in_containerds_long_words_ends_the_wait_with_exit_5(
    wait_on_worker_1: Waiting, message: str, fix: str
) -> None:
    result = wait_on_worker_1("ImagePullBackOff", message, "60")

    assert result.code == ExitStatus.NEVER_STARTS, result.err
    error = result.err.splitlines()[-1]
    assert "worker 1 will never start: image" in error and message in error, error
    assert fix in error, error


def test_an_unreachable_registry_keeps_waiting_within_its_grace(wait_on_worker_1: Waiting) -> None:
    result = wait_on_worker_1("ErrImagePull", UNREACHABLE, "1")

    assert result.code == ExitStatus.TIMEOUT
    (warning,) = [line for line in result.err.splitlines() if line.startswith("warning:")]
    assert warning.startswith(
        'warning: worker 1 cannot pull its image: image "registry.local:5000/t:1" '
        f"(ErrImagePull: {UNREACHABLE}); the registry registry.local:5000 does not answer"
    ), warning
    assert warning.endswith("the wait ends unless it starts within 10m"), warning
    assert "lacks room" not in result.err


def test_an_unreachable_registry_past_its_grace_ends_the_wait_with_exit_5(
    wait_on_worker_1: Waiting,
) -> None:
    result = wait_on_worker_1("ErrImagePull", REFUSED, "60", unreachable_grace=0.3)

    assert result.code == ExitStatus.NEVER_STARTS
    error = result.err.splitlines()[-1]
    assert error.startswith(
        "tflaunch: error: job mnist cannot start: worker 1 cannot pull its image: "
        'image "localhost:5999/tflaunch-trainer:0.1.0-cpu"'
    ), result.err
    assert "the registry localhost:5999 does not answer" in error, error
