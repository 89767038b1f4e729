"""A built-in trainer flag that the spec sets cannot be given a second time behind its back."""

from __future__ import annotations

import subprocess
import sys

import pytest

from launcher.core import render
from launcher.core.errors import SpecError
from launcher.core.load import job_from_document


def _job(extra_args):
    return job_from_document(
        {"apiVersion": "tflaunch.dev/v1alpha1", "kind": "MultiWorkerJob",
         "metadata": {"name": "mnist"},
         "spec": {"image": "trainer:1", "workers": 2, "trainer": {"extraArgs": extra_args}}}
    )  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["--epochs", "2"], "spec.trainer.epochs"),
        (["--global-batch-size=64"], "spec.trainer.globalBatchSize"),
        (["--seed", "1", "--jit-compile"], "spec.trainer.jitCompile"),
        # argparse abbreviations (issue 27 item 15)
        (["--epoch", "50"], "spec.trainer.epochs"),
        (["--global-batch", "64"], "spec.trainer.globalBatchSize"),
        (["--learn=0.1"], "spec.trainer.learningRate"),
    ],
)
def test_extra_args_that_repeat_a_spec_field_are_refused_naming_it(extra, field):
    with pytest.raises(SpecError) as caught:
        render.render(_job(extra))
    assert caught.value.field == "spec.trainer.extraArgs"
    assert field in caught.value.message


def test_other_extra_args_reach_the_trainer():
    objects = render.render(_job(["--seed", "1", "--max-train-examples", "600"]))
    assert "--max-train-examples" in str(objects)


@pytest.mark.parametrize(
    ("extra", "fix"),
    [
        (["--global-batch-size", "64"], "tflaunch local --global-batch-size N"),
        (["--learning-rate=0.1"], "--set spec.trainer.learningRate=VALUE"),
    ],
)
def test_tflaunch_local_refuses_them_after_the_double_dash_with_the_fix(extra, fix, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "launcher", "local", "--workers", "2", "--workdir", str(tmp_path),
         "--", *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert fix in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir()), "nothing started"
