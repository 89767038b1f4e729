"""The command line: defaults, parsing, and one-line errors (exit 2) for bad values."""

from __future__ import annotations

import pytest

from launcher.core import contract
from trainer.config import TrainConfig, parse_args


def test_defaults_are_the_documented_ones() -> None:
    config = parse_args([], env={})
    assert config == TrainConfig(
        data=None,
        epochs=3,
        global_batch_size=256,
        steps_per_epoch=None,
        save_freq="epoch",
        checkpoint_dir=None,
        model_dir="./model",
        expect_gpus=0,
        rendezvous_timeout=300.0,
        collective_timeout=0.0,
        stall_timeout=300.0,
        learning_rate=1e-3,
        seed=42,
        max_train_examples=None,
        max_test_examples=None,
        threads="auto",
        steps_per_execution=32,
    )


def test_data_defaults_to_the_environment_and_the_flag_wins() -> None:
    env = {contract.ENV_DATA: "/opt/tflaunch/mnist.npz"}
    assert parse_args([], env=env).data == "/opt/tflaunch/mnist.npz"
    assert parse_args(["--data", "x.npz"], env=env).data == "x.npz"


@pytest.mark.parametrize(("text", "value"), [("epoch", "epoch"), ("100", 100)])
def test_save_freq_is_epoch_or_a_step_count(text: str, value: object) -> None:
    assert parse_args(["--save-freq", text], env={}).save_freq == value


@pytest.mark.parametrize(("text", "value"), [("auto", "auto"), ("0", 0), ("3", 3)])
def test_threads_is_auto_zero_or_a_count(text: str, value: object) -> None:
    assert parse_args(["--threads", text], env={}).threads == value


@pytest.mark.parametrize(
    "argv",
    [
        ["--epochs", "0"],
        ["--epochs", "two"],
        ["--global-batch-size", "-8"],
        ["--save-freq", "0"],
        ["--save-freq", "batch"],
        ["--threads", "-1"],
        ["--rendezvous-timeout", "0"],
        ["--collective-timeout", "-1"],
        ["--learning-rate", "0"],
        ["--expect-gpus", "-1"],
        ["--max-train-examples", "0"],
        ["--no-such-flag"],
    ],
)
def test_every_bad_flag_value_is_one_line_and_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv, env={})
    assert exit_info.value.code == 2
    error_lines = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(error_lines) == 1
