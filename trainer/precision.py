"""Which Keras dtype policy a worker trains with, decided from its devices at run time.

`--precision mixed` computes in 16 bits and keeps float32 weights: `mixed_float16` (with
Keras' loss scaling) on GPUs, `mixed_bfloat16` on CPUs. `--precision auto` (the default)
decides from the device, and the worker logs the rule it followed in one line:

* CPU with AMX (`amx_bf16` in /proc/cpuinfo's flags): mixed_bfloat16. oneDNN runs bfloat16
  matrix products on AMX's tile units; on a 2-core Xeon with AMX, TensorFlow 2.21, this
  model trained 1.5-1.9x faster than in float32 in one process (1.5x as one worker, 1.2x as
  two), accuracy within 0.04 points (docs/performance.md, bench/probe_precision.py).
* CPU with avx512_bf16 but no AMX, or neither: float32. On the same Xeon with oneDNN held
  to AVX-512 BF16 (`ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16`, i.e. without AMX), mixed_bfloat16
  ran at 0.9x float32 once and 0.94-1.68x in noisy runs: no consistent gain to take.
* GPUs, all of compute capability >= 7.0 (Volta and later: float16 tensor cores):
  mixed_float16, TensorFlow's documented win there (not measured here: no GPU).
  Older or unknown GPUs: float32.

`choose` and `cpu_flags` are pure (no TensorFlow, no files), so the rule is tested with
cpuinfo text and device lists on any machine; `apply` reads the devices, sets the global
policy and must run before the model is built.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Sequence

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
CPUINFO = "/proc/cpuinfo"
AMX_FLAG = "amx_bf16"
"""AMX's bfloat16 tile instructions: what made mixed_bfloat16 faster (module docstring)."""
BF16_FLAGS = frozenset({"avx512_bf16", AMX_FLAG})
"""Native bfloat16 instructions of any width; without them bfloat16 is emulated."""


@dataclasses.dataclass(frozen=True)
class Choice:
    """The Keras policy to use and why, for the worker's log."""

    policy: str
    reason: str


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The first `flags` line of /proc/cpuinfo's text (empty when there is none)."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags") and ":" in line:
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def read_cpu_flags(path: str | None = None) -> frozenset[str]:
    """`cpu_flags` of the file at `path` (CPUINFO); empty where it cannot be read."""
    try:
        with open(path or CPUINFO, encoding="utf-8", errors="replace") as f:
            return cpu_flags(f.read())
    except OSError:
        return frozenset()


def _capability(capability: tuple[int, int] | None) -> str:
    return "unknown" if capability is None else f"{capability[0]}.{capability[1]}"


def _auto(gpu_capabilities: Sequence[tuple[int, int] | None], flags: Collection[str]) -> Choice:
    if gpu_capabilities:
        listed = ", ".join(_capability(c) for c in gpu_capabilities)
        if all(c is not None and c >= MIN_FP16_CAPABILITY for c in gpu_capabilities):
            return Choice(
                POLICY_MIXED_FLOAT16,
                f"--precision auto: GPU compute capability {listed} >= 7.0 has float16 "
                "tensor cores",
            )
        return Choice(
            POLICY_FLOAT32,
            f"--precision auto: GPU compute capability {listed}, below 7.0 or unknown: no "
            "float16 tensor cores",
        )
    if AMX_FLAG in flags:
        return Choice(
            POLICY_MIXED_BFLOAT16,
            f"--precision auto: the CPU has AMX ({AMX_FLAG}), where bfloat16 trained 1.5x "
            "faster than float32 (docs/performance.md)",
        )
    if BF16_FLAGS.intersection(flags):
        return Choice(
            POLICY_FLOAT32,
            "--precision auto: the CPU has avx512_bf16 but no AMX, where bfloat16 trained "
            "at 0.9x float32 (docs/performance.md)",
        )
    return Choice(
        POLICY_FLOAT32, "--precision auto: the CPU has no bfloat16 instructions (AMX, avx512_bf16)"
    )


def choose(
    requested: str,
    gpu_capabilities: Sequence[tuple[int, int] | None],
    flags: Collection[str],
) -> Choice:
    """The dtype policy for `requested` on a worker with these GPUs (none = CPU).

    Args:
        requested: "auto", "float32" or "mixed".
        gpu_capabilities: each visible GPU's compute capability; None where unknown.
        flags: the CPU's flags (`cpu_flags`), e.g. {"avx512_bf16", "amx_bf16", ...}.
    """
    if requested == FLOAT32:
        return Choice(POLICY_FLOAT32, "--precision float32")
    if requested == AUTO:
        return _auto(gpu_capabilities, flags)
    if gpu_capabilities:
        slow = [c for c in gpu_capabilities if c is None or c < MIN_FP16_CAPABILITY]
        if slow:
            log.warning(
                "--precision mixed on GPU(s) with compute capability %s < 7.0 (or unknown): "
                "float16 has no tensor cores there and may be slower than float32",
                slow,
            )
        return Choice(POLICY_MIXED_FLOAT16, "--precision mixed on GPU: float16 compute")
    if not BF16_FLAGS.intersection(flags):
        log.warning(
            "--precision mixed on a CPU without bfloat16 instructions (avx512_bf16/amx_bf16): "
            "bfloat16 is emulated there and likely slower than float32"
        )
    return Choice(POLICY_MIXED_BFLOAT16, "--precision mixed on CPU: bfloat16 compute")


def gpu_capabilities() -> list[tuple[int, int] | None]:
    """Compute capability of each GPU TensorFlow sees (imports TensorFlow)."""
    import tensorflow as tf

    capabilities: list[tuple[int, int] | None] = []
    for gpu in tf.config.list_physical_devices("GPU"):
        capability = tf.config.experimental.get_device_details(gpu).get("compute_capability")
        capabilities.append(tuple(capability) if capability else None)
    return capabilities


def apply(requested: str, cpuinfo: str | None = None) -> Choice:
    """Decide the policy for this worker's devices and make it Keras' global policy.

    Must run before the model is built: layers take the global policy when created.
    """
    import tf_keras as keras

    choice = choose(requested, gpu_capabilities(), read_cpu_flags(cpuinfo))
    keras.mixed_precision.set_global_policy(choice.policy)
    log.info("precision: %s (%s)", choice.policy, choice.reason)
    return choice
