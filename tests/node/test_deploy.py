"""README's deploy block for the real node, run as written: `make deploy` of
examples/real-node/mnist.yaml trains on two workers in containers, `make status` shows it
Succeeded, `make undeploy` removes every object it made. Only `export KUBECONFIG=...` is
replaced: the commands run against this session's cluster (the real_node fixture is what
`make cluster-up node-up` starts)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.e2e.conftest import ROOT, ControlPlane
from tests.node.conftest import NODE_NAME

pytestmark = [pytest.mark.node, pytest.mark.slow]

SPEC = "examples/real-node/mnist.yaml"


def readme_block() -> list[str]:
    """The README's fenced bash block that deploys SPEC, one command a line."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (block,) = [b for b in blocks if SPEC in b]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


@pytest.mark.timeout(1200)
def test_the_readmes_deploy_block_trains_on_the_real_node_and_undeploys(
    real_node: ControlPlane,
    trainer_image: str,
) -> None:
    commands = readme_block()
    assert commands[1] == "export KUBECONFIG=$PWD/.cluster/kubeconfig", commands
    env = {**os.environ, "KUBECONFIG": str(real_node.kubeconfig)}
    outputs = []
    for command in commands[:1] + commands[2:]:
        done = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, cwd=ROOT, env=env,
            timeout=1000,
        )  # fmt: skip
        assert done.returncode == 0, f"{command}:\n{done.stdout}{done.stderr}"
        outputs.append(done.stdout + done.stderr)

    deploy, status = outputs[1], outputs[2]
    assert "job mnist succeeded" in deploy, deploy
    assert "Succeeded" in status and NODE_NAME in status, status
    left = real_node.kubectl(
        "get", "jobs,services,pods,configmaps,networkpolicies", "-n", "default",
        "-l", "tflaunch.dev/job-name=mnist", "-o", "name",
    )  # fmt: skip
    assert left.out.strip() == "", left.out
