"""The README's kind targets as a user runs them (issue 34), on this rig's cluster with the
images its nodes pull from the registry: `make kind-test` trains MNIST with one worker per
kind worker node and finds the chief's result; `make kind-operator-test` installs the
operator from its pushed image, runs a MultiWorkerJob to Succeeded and deletes it with its
objects. Only KIND (the pinned kind with the rig's docker) and the images' registry
references differ from the README's commands: on a laptop, `make kind-load` loads the images
instead of a registry serving them."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.e2e.conftest import ROOT
from tests.kind.conftest import Kind

pytestmark = pytest.mark.timeout(1800)  # image pulls and training: minutes


def make(kind: Kind, target: str, *settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", target, f"KIND={kind.setting('KIND')}", f"KIND_IMAGE={kind.trainer}", *settings],
        capture_output=True, text=True, cwd=ROOT, env=kind.env(), timeout=1700,
    )  # fmt: skip


def test_make_kind_test_trains_mnist_with_one_worker_on_each_node(kind: Kind) -> None:
    done = make(kind, "kind-test")

    assert done.returncode == 0, done.stdout + done.stderr
    (ran_on,) = re.findall(r"kind-test: the workers ran on: (.*)", done.stderr)
    assert sorted(ran_on.split()) == kind.workers(), done.stderr
    assert "kind-test: chief's result: TFLAUNCH_RESULT {" in done.stderr, done.stderr
    assert done.stderr.rstrip().endswith("kind-test: passed"), done.stderr


def test_make_kind_operator_test_runs_a_multiworkerjob_from_the_pushed_operator_image(
    kind: Kind,
) -> None:
    done = make(kind, "kind-operator-test", f"OPERATOR_IMAGE={kind.registry}/tflaunch-operator")

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"installing the CRD and the operator ({kind.registry}/tflaunch-operator" in (
        done.stderr
    ), done.stderr
    for said in ("MultiWorkerJob mnist-e2e succeeded", "its objects are gone", "passed"):
        assert f"kind-operator-test: {said}\n" in done.stderr, done.stderr
