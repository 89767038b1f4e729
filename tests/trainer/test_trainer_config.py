"""The command line: defaults, parsing, and one-line configuration errors (exit 78) for
bad flags: retrying a worker with the same flags cannot help."""

from __future__ import annotations

import pytest

from launcher.core import contract
from trainer.config import TrainConfig, UsageError, parse_args
from trainer.errors import ConfigError


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
        tensorboard_dir=None,
        expect_gpus=None,
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
    ("argv", "phrase"),
    [
        (["--epochs", "0"], "argument --epochs: '0' is not a positive integer"),
        (["--epochs", "two"], "argument --epochs: 'two' is not a positive integer"),
        (["--global-batch-size", "-8"], "argument --global-batch-size"),
        (["--save-freq", "0"], "argument --save-freq"),
        (["--save-freq", "batch"], "argument --save-freq"),
        (["--threads", "-1"], "argument --threads"),
        (["--rendezvous-timeout", "0"], "argument --rendezvous-timeout"),
        (["--collective-timeout", "-1"], "argument --collective-timeout"),
        (["--learning-rate", "0"], "argument --learning-rate"),
        (["--expect-gpus", "-1"], "argument --expect-gpus"),
        (["--max-train-examples", "0"], "argument --max-train-examples"),
        (["--epochs"], "argument --epochs: expected one argument"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_every_bad_flag_is_a_one_line_config_error_not_a_retryable_exit_2(
    argv: list[str], phrase: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UsageError) as error:
        parse_args(argv, env={})
    assert isinstance(error.value, ConfigError)
    assert error.value.exit_code == contract.EXIT_CONFIG_ERROR == 78
    message = str(error.value)
    assert "\n" not in message and phrase in message, message
    assert "spec.trainer.extraArgs" in message and "python -m trainer --help" in message
    assert capsys.readouterr().err == ""  # no usage block: the one line is the message


def test_help_still_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--help"], env={})
    assert exit_info.value.code == 0
    assert f"{contract.EXIT_CONFIG_ERROR} configuration error" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--epoch", "50"], ["--global-batch", "64"], ["--learn=0.1"]])
def test_an_abbreviated_flag_is_refused_not_expanded(argv: list[str]) -> None:
    """argparse would take `--epoch 50` for --epochs 50 (issue 27 item 15)."""
    with pytest.raises(UsageError, match="unrecognized arguments"):
        parse_args(argv, env={})
