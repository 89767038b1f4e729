"""`tflaunch operator`: its flags, and one line on how to install kopf when it is missing."""

from __future__ import annotations

import sys

import pytest

import launcher.operator
from launcher.cli.main import run


def test_the_operator_command_is_part_of_tflaunch(capsys: pytest.CaptureFixture[str]):
    assert run(["--help"]) == 0
    assert "operator" in capsys.readouterr().out


def test_without_kopf_the_operator_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setitem(sys.modules, "kopf", None)  # `import kopf` raises ImportError
    monkeypatch.delitem(sys.modules, "launcher.operator.controller", raising=False)
    monkeypatch.delattr(launcher.operator, "controller", raising=False)
    assert run(["operator"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "tflaunch: error: the operator needs kopf, which is not installed: "
        "pip install 'tflaunch[operator]'"
    ]


def test_one_namespace_and_all_namespaces_exclude_each_other(capsys: pytest.CaptureFixture[str]):
    assert run(["operator", "-n", "ml", "--all-namespaces"]) == 2
    assert "exclude each other" in capsys.readouterr().err
