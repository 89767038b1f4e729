"""--precision and --jit-compile: the rule `auto` follows, and what `mixed` builds.

The rule is pure (devices in, policy out), so it is tested for GPUs on this CPU machine; the
models are built with real TensorFlow on CPU.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from trainer import precision
from trainer.config import UsageError, parse_args


@pytest.mark.parametrize(
    ("requested", "gpus", "bf16", "policy"),
    [
        ("auto", [], True, "float32"),  # bfloat16 measured slower on CPU
        ("auto", [(8, 0)], True, "float32"),  # GPUs not measured: no silent change
        ("float32", [(8, 0)], True, "float32"),
        ("mixed", [], True, "mixed_bfloat16"),
        ("mixed", [], False, "mixed_bfloat16"),
        ("mixed", [(7, 0), (8, 6)], False, "mixed_float16"),
        ("mixed", [(6, 1)], False, "mixed_float16"),
    ],
)
def test_the_policy_follows_the_request_and_the_device_type(
    requested: str, gpus: list[tuple[int, int]], bf16: bool, policy: str
) -> None:
    assert precision.choose(requested, gpus, bf16).policy == policy


@pytest.mark.parametrize(
    ("gpus", "bf16", "warns"),
    [([(6, 1)], True, "compute capability"), ([None], True, "compute capability"),
     ([], False, "without bfloat16"), ([(8, 0)], True, None), ([], True, None)],
)  # fmt: skip
def test_mixed_on_hardware_without_fast_16_bit_math_warns(
    gpus: list[tuple[int, int] | None],
    bf16: bool,
    warns: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="trainer.precision"):
        precision.choose("mixed", gpus, bf16)
    assert (warns in caplog.text) if warns else not caplog.text


def test_bf16_support_is_read_from_the_cpu_flags(tmp_path: Path) -> None:
    with_bf16, without = tmp_path / "a", tmp_path / "b"
    with_bf16.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_tile\n")
    without.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\n")
    assert precision.cpu_has_bf16(str(with_bf16))
    assert not precision.cpu_has_bf16(str(without))
    assert not precision.cpu_has_bf16(str(tmp_path / "missing"))


def test_the_flags_default_to_auto_and_off_and_refuse_other_values() -> None:
    config = parse_args([], env={})
    assert config.precision == "auto" and config.jit_compile is False
    assert parse_args(["--precision", "mixed", "--jit-compile"], env={}).jit_compile
    with pytest.raises(UsageError, match="argument --precision: invalid choice: 'bf16'"):
        parse_args(["--precision", "bf16"], env={})


@pytest.fixture
def restore_policy() -> Iterator[None]:
    import tf_keras as keras

    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.usefixtures("restore_policy")
def test_mixed_on_cpu_computes_in_bfloat16_keeps_float32_weights_and_logits_and_trains(
    tmp_path: Path,
) -> None:
    import tensorflow as tf

    from trainer import train

    config = parse_args(
        ["--precision", "mixed", "--jit-compile", "--steps-per-execution", "1"], env={}
    )
    model = train.build_compiled_model(tf.distribute.get_strategy(), config)
    conv = model.layers[0]
    assert conv.compute_dtype == "bfloat16" and conv.variable_dtype == "float32"
    assert all(v.dtype == tf.float32 for v in model.trainable_variables)
    assert model.output.dtype == tf.float32
    assert model._jit_compile is True
    x = np.random.default_rng(0).random((32, 28, 28, 1), np.float32)
    y = np.arange(32) % 10
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.usefixtures("restore_policy")
def test_auto_on_cpu_builds_the_float32_model() -> None:
    import tensorflow as tf

    from trainer import train

    model = train.build_compiled_model(tf.distribute.get_strategy(), parse_args([], env={}))
    assert model.layers[0].compute_dtype == "float32"
    assert model._jit_compile is False
