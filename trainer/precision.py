"""Which Keras dtype policy a worker trains with, decided from its devices at run time.

`--precision mixed` computes in 16 bits and keeps float32 weights: `mixed_float16` (with
Keras' loss scaling) on GPUs of compute capability >= 7.0, whose tensor cores run float16,
and `mixed_bfloat16` on CPUs. `--precision auto` (the default) picks only what was measured
faster on that kind of hardware (docs/performance.md, bench/bench_speed.py):

* CPU: float32. On an AVX-512-BF16 Xeon (2 cores, TensorFlow 2.21 with oneDNN),
  mixed_bfloat16 trained this model at 0.83-0.93x float32's images/s, in interleaved runs.
* GPU: float32, because no GPU was available to measure on; mixed_float16 on compute
  capability >= 7.0 is the usual win there, so measure `--precision mixed` and opt in.

`choose` is pure (no TensorFlow), so the rule is testable on any machine; `apply` sets
the global policy and must run before the model is built.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

log = logging.getLogger(__name__)

AUTO = "auto"
FLOAT32 = "float32"
MIXED = "mixed"
CHOICES = (AUTO, FLOAT32, MIXED)

POLICY_FLOAT32 = "float32"
POLICY_MIXED_FLOAT16 = "mixed_float16"
POLICY_MIXED_BFLOAT16 = "mixed_bfloat16"
MIN_FP16_CAPABILITY = (7, 0)
"""Volta and later: float16 tensor cores. Older GPUs gain nothing from mixed_float16."""


@dataclasses.dataclass(frozen=True)
class Choice:
    """The Keras policy to use and why, for the worker's log."""

    policy: str
    reason: str


def choose(
    requested: str,
    gpu_capabilities: Sequence[tuple[int, int] | None],
    cpu_has_bf16: bool,
) -> Choice:
    """The dtype policy for `requested` on a worker with these GPUs (none = CPU).

    Args:
        requested: "auto", "float32" or "mixed".
        gpu_capabilities: each visible GPU's compute capability; None where unknown.
        cpu_has_bf16: the CPU has native bfloat16 instructions (avx512_bf16 / amx_bf16).
    """
    if requested == FLOAT32:
        return Choice(POLICY_FLOAT32, "--precision float32")
    if requested == AUTO:
        device = "GPU" if gpu_capabilities else "CPU"
        return Choice(
            POLICY_FLOAT32,
            f"--precision auto on {device}: float32 (mixed precision was "
            + (
                "measured slower on CPU, docs/performance.md)"
                if device == "CPU"
                else "not measured on GPUs yet; try --precision mixed)"
            ),
        )
    if gpu_capabilities:
        slow = [c for c in gpu_capabilities if c is None or c < MIN_FP16_CAPABILITY]
        if slow:
            log.warning(
                "--precision mixed on GPU(s) with compute capability %s < 7.0 (or unknown): "
                "float16 has no tensor cores there and may be slower than float32",
                slow,
            )
        return Choice(POLICY_MIXED_FLOAT16, "--precision mixed on GPU: float16 compute")
    if not cpu_has_bf16:
        log.warning(
            "--precision mixed on a CPU without bfloat16 instructions (avx512_bf16/amx_bf16): "
            "bfloat16 is emulated there and likely slower than float32"
        )
    return Choice(POLICY_MIXED_BFLOAT16, "--precision mixed on CPU: bfloat16 compute")


def cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True when the CPU flags list avx512_bf16 or amx_bf16 (Linux; False elsewhere)."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def gpu_capabilities() -> list[tuple[int, int] | None]:
    """Compute capability of each GPU TensorFlow sees (imports TensorFlow)."""
    import tensorflow as tf

    capabilities: list[tuple[int, int] | None] = []
    for gpu in tf.config.list_physical_devices("GPU"):
        capability = tf.config.experimental.get_device_details(gpu).get("compute_capability")
        capabilities.append(tuple(capability) if capability else None)
    return capabilities


def apply(requested: str) -> Choice:
    """Decide the policy for this worker's devices and make it Keras' global policy.

    Must run before the model is built: layers take the global policy when created.
    """
    import tf_keras as keras

    choice = choose(requested, gpu_capabilities(), cpu_has_bf16())
    keras.mixed_precision.set_global_policy(choice.policy)
    log.info("precision: %s (%s)", choice.policy, choice.reason)
    return choice
