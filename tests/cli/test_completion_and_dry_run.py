"""`tflaunch completion` and `submit --dry-run[=client|server]` without a cluster: the
scripts a shell sources, the completion protocol end to end in a child process, a job-name
lookup that gives up instead of hanging the shell, and the old `--dry-run` spellings."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from launcher.cli import main as cli
from launcher.cli.dry_run import with_dry_run_values

ROOT = Path(__file__).resolve().parents[2]


def tflaunch(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        cwd=ROOT,
        timeout=timeout,
        check=True,
    )
    return proc.stdout


def complete(words: str, env: dict[str, str] | None = None, timeout: float = 60) -> list[str]:
    """What bash would offer after `words` (click's bash protocol: `type,value` lines)."""
    cword = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    protocol = {"COMP_WORDS": words, "COMP_CWORD": cword, "_TFLAUNCH_COMPLETE": "bash_complete"}
    out = tflaunch(env={**protocol, **(env or {})}, timeout=timeout)
    return [line.split(",", 1)[1] for line in out.splitlines() if line]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_completion_script_calls_tflaunch_back_with_clicks_variable(shell: str) -> None:
    script = tflaunch("completion", shell)

    assert f"_TFLAUNCH_COMPLETE={shell}_complete" in script


def test_the_bash_script_is_valid_bash_and_registers_the_command(tmp_path: Path) -> None:
    script = tmp_path / "tflaunch.bash"
    script.write_text(tflaunch("completion", "bash"))

    check = subprocess.run(
        ["bash", "-c", f"source {script} && complete -p tflaunch"], capture_output=True, text=True
    )

    assert check.returncode == 0, check.stderr
    assert "_tflaunch_completion" in check.stdout


def test_commands_and_flags_complete_from_the_cli_itself() -> None:
    assert "status" in complete("tflaunch sta")
    assert complete("tflaunch submit --dry") == ["--dry-run"]
    assert complete("tflaunch list -o ") == ["json", "yaml", "wide", "name"]


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield server.getsockname()[1]


def test_job_names_give_up_instead_of_hanging_when_the_api_server_never_answers(
    black_hole: int, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://127.0.0.1:{black_hole}"}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    env = {"KUBECONFIG": str(kubeconfig), "TFLAUNCH_COMPLETION_TIMEOUT": "1"}

    # A plain `list` against this server waits out its 60 s read timeout (twice, with one
    # retry); the completion must be back well inside the 45 s given here, with nothing.
    assert complete("tflaunch status ", env=env, timeout=45) == []


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        (["--dry-run", "job.yaml"], ["--dry-run=server", "job.yaml"]),
        (["job.yaml", "--dry-run"], ["job.yaml", "--dry-run=server"]),
        (["--dry-run", "client", "job.yaml"], ["--dry-run=client", "job.yaml"]),
        (["--dry-run=client", "job.yaml"], ["--dry-run=client", "job.yaml"]),
        (["--dry-run", "--wait"], ["--dry-run=server", "--wait"]),
        (["--", "--dry-run"], ["--", "--dry-run"]),
    ],
)
def test_a_bare_dry_run_means_server_and_never_swallows_the_spec_file(
    given: list[str], parsed: list[str]
) -> None:
    assert with_dry_run_values(given) == parsed


def test_a_client_dry_run_renders_and_checks_without_any_cluster(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")

    code = cli.run(["submit", str(ROOT / "examples" / "mnist.yaml"), "--dry-run=client"])

    out = capsys.readouterr().out
    assert code == 0
    assert "job.batch/mnist-worker rendered (client dry run)" in out.splitlines()


def test_a_client_dry_run_still_refuses_a_bad_spec(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")

    code = cli.run(["submit", "--dry-run=client", "--set", "spec.wrokers=3"])

    assert code == 2
    assert "spec.wrokers: unknown key; did you mean 'workers'?" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "needs_cluster"), [("1", True), ("true", True), ("client", False)]
)
def test_the_old_boolean_environment_variable_still_means_a_server_dry_run(
    value: str,
    needs_cluster: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    monkeypatch.setenv("TFLAUNCH_SUBMIT_DRY_RUN", value)

    code = cli.run(["submit"])

    err = capsys.readouterr().err
    assert (code == 2 and "no kubeconfig" in err) if needs_cluster else code == 0, err
