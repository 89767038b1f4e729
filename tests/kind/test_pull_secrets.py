"""A private registry (issue 34): hack/kind.sh's second registry serves the pushed images
behind htpasswd. Without `spec.imagePullSecrets` the nodes are refused and `wait` ends with
exit 5 saying so; with a docker-registry Secret named there, the job trains."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.core.errors import ExitStatus
from tests.kind.conftest import TRAINER, Kind, mnist_spec

pytestmark = pytest.mark.timeout(1200)  # image pulls and training: minutes


def test_a_private_image_without_a_pull_secret_ends_the_wait_naming_the_fix(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    image = f"{kind.registry_auth}/{TRAINER}"
    spec = mnist_spec(tmp_path / "job.yaml", "nosecret", namespace, image, imagePullPolicy="Always")

    assert kind.tflaunch("submit", str(spec)).code == 0
    run = kind.tflaunch("wait", "nosecret", "-n", namespace, "--timeout", "10m", timeout=700)

    assert run.code == ExitStatus.NEVER_STARTS, run
    error = run.err.strip().splitlines()[-1]
    assert f'will never start: image "{image}"' in error, run.err
    assert "401 Unauthorized" in error or "authorization" in error, run.err
    assert "spec.imagePullSecrets" in error, run.err


def test_a_private_image_with_its_pull_secret_trains(
    kind: Kind, namespace: str, tmp_path: Path
) -> None:
    password = Path(kind.setting("REGISTRY_AUTH_PASSWORD_FILE")).read_text()
    kind.kubectl(
        "create", "secret", "docker-registry", "regcred", "-n", namespace,
        f"--docker-server={kind.registry_auth}",
        f"--docker-username={kind.setting('REGISTRY_AUTH_USER')}",
        f"--docker-password={password.strip()}",
    )  # fmt: skip
    image = f"{kind.registry_auth}/{TRAINER}"
    spec = mnist_spec(
        tmp_path / "job.yaml", "withsecret", namespace, image,
        imagePullPolicy="Always", imagePullSecrets=["regcred"],
    )  # fmt: skip

    assert kind.tflaunch("submit", str(spec)).code == 0
    run = kind.tflaunch("wait", "withsecret", "-n", namespace, "--timeout", "15m", timeout=1000)

    assert run.code == 0, run
    pods = kind.get("pods", "-n", namespace)["items"]
    assert {p["spec"]["imagePullSecrets"][0]["name"] for p in pods} == {"regcred"}
    assert len({p["spec"]["nodeName"] for p in pods}) == 2, "one worker per kind node"
