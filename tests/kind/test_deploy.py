"""README's deploy block for the kind rig, run as written (issue 34): `make deploy` of
examples/kind/mnist.yaml with REGISTRY from `hack/kind.sh env` trains on two workers, one on
each kind worker node, their image pulled from the registry; `make status` shows it
Succeeded on both nodes; `make undeploy` removes every object it made. The block's first and
last lines (the rig up and the images pushed, the rig down) are the session fixture's."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.e2e.conftest import ROOT
from tests.kind.conftest import Kind

pytestmark = pytest.mark.timeout(1200)  # an image pull and training: minutes

SPEC = "examples/kind/mnist.yaml"


def readme_block() -> list[str]:
    """The README's fenced bash block that deploys SPEC, one command a line."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (block,) = [b for b in blocks if SPEC in b]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readmes_kind_block_deploys_from_the_registry_on_both_nodes_and_undeploys(
    kind: Kind,
) -> None:
    commands = readme_block()
    assert commands[0] == "hack/kind.sh up && hack/kind.sh push", commands
    assert commands[-1] == "hack/kind.sh down", commands
    script = "set -euo pipefail\n" + "\n".join(
        f"echo '>>> {command}'\n{command}" for command in commands[1:-1]
    )
    done = subprocess.run(
        ["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        cwd=ROOT, env=kind.env(), timeout=1100,
    )  # fmt: skip
    said = done.stdout

    assert done.returncode == 0, said
    assert "job mnist succeeded" in said, said
    status = said.split(">>> make status undeploy", 1)[1]
    assert "Succeeded" in status, status
    for node in kind.workers():  # one worker on each node
        assert node in status, status
    pulled = kind.kubectl(
        "get", "events", "-n", "default", "--field-selector", "reason=Pulled", "-o", "json",
    )  # fmt: skip
    assert f"{kind.registry}/tflaunch-trainer:" in pulled.out, pulled.out
    left = kind.kubectl(
        "get", "jobs,services,pods,configmaps,networkpolicies", "-n", "default",
        "-l", "tflaunch.dev/job-name=mnist", "-o", "name",
    )  # fmt: skip
    assert left.out.strip() == "", left.out
