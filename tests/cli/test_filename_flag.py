"""`-f/--filename FILE`, kubectl's flag for the file to apply, names the spec on every
command that takes one (`submit`, `render`, `validate`, `tfconfig`, `local`), as it already
did on `doctor`: the same as the SPEC argument; both at once is a usage error."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
MNIST = str(ROOT / "examples" / "mnist.yaml")


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.run(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "command",
    [["render"], ["validate", "--no-schema"], ["tfconfig"], ["submit", "--dry-run=client"]],
)
def test_dash_f_is_the_spec_argument(
    command: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A spec other than the built-in default, so that reading it shows in the output.
    spec = tmp_path / "job.yaml"
    spec.write_text(Path(MNIST).read_text().replace("name: mnist", "name: from-file", 1))
    by_argument = _run(capsys, *command, str(spec))
    for flag in ("-f", "--filename"):
        assert _run(capsys, *command, flag, str(spec)) == by_argument
    assert by_argument[0] == 0 and "from-file" in by_argument[1], by_argument


def test_dash_f_with_overrides_and_a_client_dry_run_needs_no_cluster(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    code, out, _ = _run(capsys, "submit", "-f", MNIST, "--workers", "4", "--dry-run=client")
    assert code == 0 and "job.batch/mnist-worker rendered (client dry run)" in out.splitlines()


def test_the_spec_given_twice_is_one_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "render", "-f", MNIST, str(ROOT / "examples" / "other.yaml"))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "-f/--filename" in line and "SPEC" in line, line


def test_help_shows_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("submit", "render", "validate", "tfconfig", "local"):
        code, out, _ = _run(capsys, command, "--help")
        assert code == 0 and "-f, --filename FILE" in out, (command, out)


def test_with_dash_f_every_positional_word_of_local_is_the_programs() -> None:
    from launcher.cli.local_cmd import split_trainer_args

    assert split_trainer_args("5", ("6",), spec_filename="job.yaml") == (None, ("5", "6"))
    assert split_trainer_args("job.yaml", ("6",)) == ("job.yaml", ("6",))


@pytest.mark.parametrize(
    ("command", "hint"),
    [(["tfconfig", "1"], "--index 1 picks the worker"),
     (["render", "3"], "--workers 3 sets the number of workers"),
     (["local", "2"], "--workers 2 sets the number of workers")],
)  # fmt: skip
def test_a_number_where_the_spec_goes_names_the_flag_it_meant(
    command: list[str],
    hint: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)  # no file named "1" here
    code, out, err = _run(capsys, *command)
    (line,) = err.strip().splitlines()
    assert code == 2 and not out
    assert "is a number, not a spec file" in line and hint in line, line


def test_a_spec_file_named_by_a_number_is_still_read(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "7").write_text(Path(MNIST).read_text())
    code, out, _ = _run(capsys, "render", "7")
    assert code == 0 and "mnist-worker" in out
