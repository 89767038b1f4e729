"""Flags and labels from the review of issue 27 (item 18): what a user may set, what the
environment may not set, and names refused before any request."""

from __future__ import annotations

import pytest

from launcher.cli.main import cli, run
from launcher.core.errors import SpecError
from launcher.core.load import load_job

EXAMPLE = "examples/mnist.yaml"


@pytest.mark.parametrize(
    "key", ["app.kubernetes.io/part-of", "app.kubernetes.io/version"]
)  # fmt: skip
def test_kubernetes_recommended_labels_are_allowed(key):
    job = load_job(EXAMPLE, [("spec.labels", {key: "ml-platform"})])
    assert job.spec.labels[key] == "ml-platform"
    job = load_job(EXAMPLE, [("spec.annotations", {key: "x"})])
    assert job.spec.annotations[key] == "x"


@pytest.mark.parametrize("key", ["app.kubernetes.io/other", "kubernetes.io/x", "a.k8s.io/y"])
def test_other_keys_under_kubernetes_prefixes_stay_reserved(key):
    with pytest.raises(SpecError, match="reserved for Kubernetes"):
        load_job(EXAMPLE, [("spec.labels", {key: "a"})])


def test_a_recommended_label_tflaunch_sets_itself_is_still_refused():
    with pytest.raises(SpecError, match="set by tflaunch"):
        load_job(EXAMPLE, [("spec.labels", {"app.kubernetes.io/managed-by": "me"})])


def test_the_environment_cannot_turn_a_resubmit_into_a_replace(monkeypatch):
    monkeypatch.setenv("TFLAUNCH_SUBMIT_REPLACE", "1")
    monkeypatch.setenv("TFLAUNCH_SUBMIT_WAIT_FOR_IT", "1")  # a harmless flag still comes from it
    submit = cli.commands["submit"]  # click gives a subcommand the prefix TFLAUNCH_SUBMIT
    with submit.make_context("submit", [EXAMPLE], auto_envvar_prefix="TFLAUNCH_SUBMIT") as context:
        assert context.params["replace"] is False
        assert context.params["wait_for_it"] is True
    with submit.make_context(
        "submit", [EXAMPLE, "--replace"], auto_envvar_prefix="TFLAUNCH_SUBMIT"
    ) as c:
        assert c.params["replace"] is True


@pytest.mark.parametrize("command", [["list"], ["status", "mnist"], ["delete", "mnist"]])
@pytest.mark.parametrize("namespace", ["Bad_NS", "a b", "x" * 64, "ns\n"])
def test_a_namespace_no_namespace_can_have_is_refused_before_any_request(
    capsys, command, namespace
):
    code = run([*command, "-n", namespace, "--kubeconfig", "/nonexistent/kubeconfig"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "namespace" in err and "kubeconfig" not in err.lower()
