"""Hostile values render refuses in one line (issue 27, items 6 and 7): a trailing newline
passes no format rule, and no integer wraps around in the API server's int32/int64."""

from __future__ import annotations

import json

import click
import click._compat
import click.utils
import pytest

from launcher.cli.main import run
from launcher.core.errors import SpecError, printable
from launcher.core.load import load_job
from launcher.core.yamldoc import parse_assignment

EXAMPLE = "examples/mnist.yaml"
SCRIPT = {"name": "train.py", "source": "print(1)\n"}


def _error(overrides: list[tuple[str, object]]) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load_job(EXAMPLE, overrides)
    return caught.value


# --- item 6: a trailing newline passes no pattern ------------------------------------------

NEWLINE_FIELDS = [
    ("metadata.name", [("metadata.name", "mnist\n")]),
    ("metadata.namespace", [("metadata.namespace", "team\n")]),
    ("spec.image", [("spec.image", "img\n")]),
    ("spec.clusterDomain", [("spec.clusterDomain", "cluster.local\n")]),
    ("spec.checkpoint.run", [("spec.checkpoint.run", "run1\n")]),
    ("spec.checkpoint.claimName", [("spec.checkpoint.claimName", "ckpt\n")]),
    ("spec.schedulerName", [("spec.schedulerName", "volcano\n")]),
    ("spec.priorityClassName", [("spec.priorityClassName", "high\n")]),
    ("spec.serviceAccountName", [("spec.serviceAccountName", "trainer\n")]),
    ("spec.queueName", [("spec.gang", "volcano"), ("spec.queueName", "q\n")]),
    ("spec.imagePullSecrets[0]", [("spec.imagePullSecrets", ["regcred\n"])]),
    ("spec.labels.team", [("spec.labels", {"team": "a\n"})]),
    ("spec.labels.team\n", [("spec.labels", {"team\n": "a"})]),
    ("spec.annotations.example.com/x\n", [("spec.annotations", {"example.com/x\n": "a"})]),
    ("spec.nodeSelector.pool\n", [("spec.nodeSelector", {"pool\n": "a"})]),
    ("spec.env.NAME\n", [("spec.env", {"NAME\n": "a"})]),
    (
        "spec.shmSize",
        [("spec.gpusPerWorker", 1), ("spec.shmSize", "1Gi\n")],
    ),
    ("spec.resources.limits.cpu", [("spec.resources.limits.cpu", "2\n")]),
    ("spec.resources.requests.memory", [("spec.resources.requests.memory", "1Gi\n")]),
    ("spec.tolerations[0].value", [("spec.tolerations", [{"key": "k", "value": "v\n"}])]),
    ("spec.tolerations[0].key.k\n", [("spec.tolerations", [{"key": "k\n", "value": "v"}])]),
    ("spec.script.name", [("spec.script", {**SCRIPT, "name": "train.py\n"})]),
]


@pytest.mark.parametrize(
    "field, overrides", NEWLINE_FIELDS, ids=[f for f, _ in NEWLINE_FIELDS]
)  # fmt: skip
def test_a_trailing_newline_is_refused_naming_the_field(field, overrides):
    assert _error(overrides).field == printable(field)  # the newline shown as \n


def test_the_same_values_without_the_newline_are_accepted():
    overrides: list[tuple[str, object]] = []
    for _, field_overrides in NEWLINE_FIELDS:
        for path, value in field_overrides:
            overrides.append((path, _strip(value)))
    job = load_job(EXAMPLE, [o for o in overrides if o[0] != "spec.script"])
    assert job.spec.image == "img" and job.metadata.name == "mnist"


def _strip(value: object) -> object:
    if isinstance(value, str):
        return value.rstrip("\n")
    if isinstance(value, list):
        return [_strip(v) for v in value]
    if isinstance(value, dict):
        return {str(_strip(k)): _strip(v) for k, v in value.items()}
    return value


# --- item 7: integers stay within what the API server stores -------------------------------

INT64_OVER = 2**63
INT32_FIELDS = [
    "spec.terminationGracePeriodSeconds",
    "spec.backoffLimit",
    "spec.trainer.epochs",
    "spec.trainer.globalBatchSize",
    "spec.trainer.stepsPerEpoch",
    "spec.trainer.rendezvousTimeoutSeconds",
    "spec.trainer.stallTimeoutSeconds",
    "spec.trainer.collectiveTimeoutSeconds",
    "spec.trainer.heartbeatTimeoutSeconds",
    "spec.trainer.saveFreq",
]


@pytest.mark.parametrize("field", INT32_FIELDS)
@pytest.mark.parametrize("value", [2**31, 2**63 - 1, INT64_OVER, 2**64 + 5])
def test_an_integer_above_int32_is_refused_naming_the_field(field, value):
    error = _error([(field, value)])
    assert error.field == field
    assert "at most" in error.message or "a number of steps" in error.message  # saveFreq


@pytest.mark.parametrize(
    "overrides, field",
    [
        (
            [("spec.command", ["python", "t.py"]), ("spec.rendezvousTimeoutSeconds", 2**31)],
            "spec.rendezvousTimeoutSeconds",
        ),
        (
            [("spec.command", ["python", "t.py"]), ("spec.stallTimeoutSeconds", 2**63)],
            "spec.stallTimeoutSeconds",
        ),
        (
            [
                (
                    "spec.tolerations",
                    [{"key": "k", "effect": "NoExecute", "tolerationSeconds": 2**64 + 5}],
                )
            ],
            "spec.tolerations[0].tolerationSeconds",
        ),
        ([("spec.port", 2**63)], "spec.port"),
        ([("spec.workers", -(2**63) - 1)], "spec.workers"),
    ],
)
def test_an_integer_beyond_int64_is_refused_anywhere(overrides, field):
    assert _error(overrides).field == field


def test_int64_is_the_limit_where_kubernetes_stores_int64():
    toleration = {"key": "k", "effect": "NoExecute", "tolerationSeconds": 2**63 - 1}
    job = load_job(EXAMPLE, [("spec.tolerations", [toleration])])
    assert job.spec.tolerations[0].toleration_seconds == 2**63 - 1


def test_a_learning_rate_that_is_not_a_finite_number_is_refused():
    assert _error([("spec.trainer.learningRate", 10**400)]).field == "spec.trainer.learningRate"
    assert _error([("spec.trainer.learningRate", float("inf"))]).field == (
        "spec.trainer.learningRate"
    )


def _preferred(weight: int) -> dict[str, object]:
    term = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": weight, "preference": term}]}}  # fmt: skip


@pytest.mark.parametrize("weight", [0, 101, 2**32 + 50, -1])
def test_an_affinity_weight_outside_1_to_100_is_refused(weight):
    error = _error([("spec.affinity", _preferred(weight))])
    assert error.field == (
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"
    )


def test_set_of_a_grace_period_beyond_int64_is_one_line_and_exit_2(capsys):
    code = run(
        ["render", EXAMPLE, "--set", "spec.terminationGracePeriodSeconds=9223372036854775808"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "spec.terminationGracePeriodSeconds" in err


def test_parse_assignment_keeps_a_huge_integer_exact():
    assert parse_assignment("spec.port=9223372036854775808")[1] == 2**63


@pytest.mark.parametrize("key", ["A\x1b[2J\x1b[31mB", "A\u202eB", "A\x00B", "A\nB"])
def test_control_characters_in_a_name_are_escaped_in_the_one_line_error(
    tmp_path, capsys, monkeypatch, key
):
    # As on a terminal: click strips ANSI sequences only from output that is not one.
    monkeypatch.setattr(click.utils, "should_strip_ansi", lambda *_, **__: False)
    monkeypatch.setattr(click._compat, "should_strip_ansi", lambda *_, **__: False)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "apiVersion: tflaunch.dev/v1alpha1\nkind: MultiWorkerJob\nmetadata: {name: a}\n"
        f"spec: {{image: r.io/t:1, env: {{{json.dumps(key)}: x}}}}\n"
    )
    assert run(["render", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.isprintable() is False  # only the final newline
    assert err[:-1].isprintable(), repr(err)
    assert "spec.env.A" in err


@pytest.mark.parametrize(
    "path, value",
    [("spec.env", {"X": "\ud83d"}), ("spec.labels", {"a\udc00": "b"}),
     ("spec.affinity", {"nodeAffinity": {"x": "\ud83d"}})],
)  # fmt: skip
def test_a_lone_surrogate_is_refused_in_one_line(path, value):
    error = _error([(path, value)])
    assert error.field.startswith(path) and "surrogate" in error.message


def test_a_lone_surrogate_escape_in_a_spec_file_is_exit_2(tmp_path, capsys):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "apiVersion: tflaunch.dev/v1alpha1\nkind: MultiWorkerJob\nmetadata: {name: a}\n"
        'spec: {image: r.io/t:1, env: {X: "\\ud83d"}}\n'
    )
    assert run(["render", str(spec)]) == 2
    assert "spec.env.X" in capsys.readouterr().err


# --- item 17: hostile files are one line, exit 2 -------------------------------------------

DEEP_LIST = "[" * 5000 + "]" * 5000
DEEP_MAP = "{a: " * 5000 + "1" + "}" * 5000


@pytest.mark.parametrize("value", [DEEP_LIST, DEEP_MAP])
def test_yaml_nested_5000_deep_is_one_line(tmp_path, capsys, value):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "apiVersion: tflaunch.dev/v1alpha1\nkind: MultiWorkerJob\nmetadata: {name: a}\n"
        f"spec:\n  image: r.io/t:1\n  affinity: {value}\n"
    )
    assert run(["render", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nests more than" in err
    assert run(["render", EXAMPLE, "--set", f"spec.affinity={value}"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize(
    "args, field",
    [(["render", "/dev/zero"], "SPEC"), (["render", "--script", "/dev/zero"], "spec.script")],
)
def test_an_endless_file_is_read_only_as_far_as_the_limit(capsys, args, field):
    assert run(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and "larger than" in err


def test_an_out_dir_that_cannot_be_written_is_one_line(capsys, tmp_path):
    assert run(["render", EXAMPLE, "--out-dir", "/proc/tflaunch-x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out-dir" in err
