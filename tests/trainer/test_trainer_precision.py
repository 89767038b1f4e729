"""--precision and --jit-compile: the rule `auto` follows, and what `mixed` builds.

The rule is pure (cpuinfo text and GPU capabilities in, policy out), so it is tested for
every kind of device on this CPU machine; the models are built with real TensorFlow on CPU.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from trainer import precision
from trainer.config import UsageError, parse_args

AMX_XEON = (
    "processor\t: 0\nvendor_id\t: GenuineIntel\n"
    "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8\n"
    "bugs\t\t: spectre_v1\n\nprocessor\t: 1\n"
    "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8\n"
)
"""/proc/cpuinfo of this machine's kind of CPU (Sapphire Rapids): AMX and AVX-512 BF16."""
AVX512_BF16_ONLY = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
"""Cooper Lake / Zen 4: bfloat16 dot products in AVX-512, no AMX tiles."""
NO_BF16 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f\n"
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes\n"
"""aarch64's cpuinfo has no `flags` line: no x86 flag can be claimed."""


def flags(cpuinfo: str) -> frozenset[str]:
    return precision.cpu_flags(cpuinfo)


@pytest.mark.parametrize(
    ("cpuinfo", "policy", "why"),
    [
        (AMX_XEON, "mixed_bfloat16", "has AMX (amx_bf16)"),
        (AVX512_BF16_ONLY, "float32", "avx512_bf16 but no AMX"),
        (NO_BF16, "float32", "no bfloat16 instructions"),
        (ARM, "float32", "no bfloat16 instructions"),
        ("", "float32", "no bfloat16 instructions"),
    ],
)
def test_auto_on_cpu_picks_bfloat16_only_where_the_cpu_has_amx(
    cpuinfo: str, policy: str, why: str
) -> None:
    choice = precision.choose("auto", [], flags(cpuinfo))
    assert choice.policy == policy
    assert why in choice.reason and "--precision auto" in choice.reason


@pytest.mark.parametrize(
    ("gpus", "policy", "why"),
    [
        ([(7, 0)], "mixed_float16", "7.0 >= 7.0"),
        ([(8, 0), (9, 0)], "mixed_float16", "8.0, 9.0 >= 7.0"),
        ([(8, 0), (6, 1)], "float32", "8.0, 6.1, below 7.0"),
        ([(6, 1)], "float32", "6.1, below 7.0"),
        ([None], "float32", "unknown"),
    ],
)
def test_auto_on_gpus_picks_float16_only_when_every_gpu_has_tensor_cores(
    gpus: list[tuple[int, int] | None], policy: str, why: str
) -> None:
    choice = precision.choose("auto", gpus, flags(AMX_XEON))  # the GPUs decide, not the CPU
    assert choice.policy == policy
    assert why in choice.reason


@pytest.mark.parametrize(
    ("requested", "gpus", "cpuinfo", "policy"),
    [
        ("float32", [(8, 0)], AMX_XEON, "float32"),
        ("float32", [], AMX_XEON, "float32"),
        ("mixed", [], AMX_XEON, "mixed_bfloat16"),
        ("mixed", [], NO_BF16, "mixed_bfloat16"),
        ("mixed", [(7, 0), (8, 6)], NO_BF16, "mixed_float16"),
        ("mixed", [(6, 1)], NO_BF16, "mixed_float16"),
    ],
)
def test_an_explicit_request_is_followed_on_any_device(
    requested: str, gpus: list[tuple[int, int]], cpuinfo: str, policy: str
) -> None:
    assert precision.choose(requested, gpus, flags(cpuinfo)).policy == policy


@pytest.mark.parametrize(
    ("gpus", "cpuinfo", "warns"),
    [([(6, 1)], AMX_XEON, "compute capability"), ([None], AMX_XEON, "compute capability"),
     ([], NO_BF16, "without bfloat16"), ([(8, 0)], AMX_XEON, None), ([], AMX_XEON, None),
     ([], AVX512_BF16_ONLY, None)],
)  # fmt: skip
def test_mixed_on_hardware_without_fast_16_bit_math_warns(
    gpus: list[tuple[int, int] | None],
    cpuinfo: str,
    warns: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="trainer.precision"):
        precision.choose("mixed", gpus, flags(cpuinfo))
    assert (warns in caplog.text) if warns else not caplog.text


def test_the_cpu_flags_are_the_first_flags_line_of_cpuinfo(tmp_path: Path) -> None:
    assert {"amx_bf16", "avx512_bf16", "amx_tile"} <= flags(AMX_XEON)
    assert "amx_bf16" not in flags(AVX512_BF16_ONLY)
    assert flags(ARM) == frozenset() and flags("") == frozenset()
    (tmp_path / "cpuinfo").write_text(AVX512_BF16_ONLY)
    assert precision.read_cpu_flags(str(tmp_path / "cpuinfo")) == flags(AVX512_BF16_ONLY)
    assert precision.read_cpu_flags(str(tmp_path / "missing")) == frozenset()


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
@pytest.mark.parametrize(
    ("cpuinfo", "dtype"),
    [(NO_BF16, "float32"), (AVX512_BF16_ONLY, "float32"), (AMX_XEON, "bfloat16")],
)
def test_auto_on_cpu_builds_the_model_the_cpu_flags_call_for(
    cpuinfo: str,
    dtype: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import tensorflow as tf

    from trainer import train

    (tmp_path / "cpuinfo").write_text(cpuinfo)
    monkeypatch.setattr(precision, "CPUINFO", str(tmp_path / "cpuinfo"))
    with caplog.at_level(logging.INFO, logger="trainer.precision"):
        model = train.build_compiled_model(tf.distribute.get_strategy(), parse_args([], env={}))
    assert model.layers[0].compute_dtype == dtype
    assert model._jit_compile is False
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("precision:")]
    assert "--precision auto: the CPU" in line  # one line saying what was chosen and why
