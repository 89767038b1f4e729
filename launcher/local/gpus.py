"""Which GPUs each of `tflaunch local`'s workers gets.

In a pod, the device plugin hands each worker its own `gpusPerWorker` GPUs. Local workers
share one machine: without a split every worker's TensorFlow would see (and claim the
memory of) every GPU, and MultiWorkerMirroredStrategy would count each GPU once per worker.
So worker i gets the i-th slice of the GPUs this machine shows, through
CUDA_VISIBLE_DEVICES, and a job that needs more GPUs than there are is refused before any
worker starts. The GPUs are read from the NVIDIA driver (/proc/driver/nvidia/gpus), or from
the user's own CUDA_VISIBLE_DEVICES, which then says which ones tflaunch may use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from launcher.core.errors import SpecError

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
DRIVER_GPUS = "/proc/driver/nvidia/gpus"
"""One directory per GPU (named by its PCI address) while the NVIDIA driver is loaded."""


def visible_gpus(env: Mapping[str, str], driver_gpus: str = DRIVER_GPUS) -> tuple[list[str], str]:
    """The GPUs workers may use, as CUDA_VISIBLE_DEVICES entries, and where that came from."""
    if CUDA_VISIBLE_DEVICES in env:
        entries = [e.strip() for e in env[CUDA_VISIBLE_DEVICES].split(",") if e.strip()]
        # CUDA stops at the first invalid entry; "-1" is the usual way to say "none"
        usable = entries[: entries.index("-1")] if "-1" in entries else entries
        return usable, f"{CUDA_VISIBLE_DEVICES}={env[CUDA_VISIBLE_DEVICES]!r}"
    try:
        count = len(os.listdir(driver_gpus))
    except OSError:
        return [], f"no NVIDIA driver ({driver_gpus} does not exist)"
    return [str(i) for i in range(count)], f"{count} in {driver_gpus}"


def assign(workers: int, per_worker: int, gpus: Sequence[str], source: str) -> list[str] | None:
    """Each worker's CUDA_VISIBLE_DEVICES (None: CPU workers, nothing to split).

    Raises:
        SpecError: the job needs more GPUs than `gpus`; nothing has started.
    """
    if per_worker <= 0:
        return None
    needed = workers * per_worker
    if len(gpus) < needed:
        raise SpecError(
            "spec.gpusPerWorker",
            f"{workers} local worker(s) x {per_worker} GPU(s) need {needed} GPU(s), and this "
            f"machine has {len(gpus)} ({source}); use --gpus 0 for CPU workers, or fewer "
            "workers or GPUs per worker",
        )
    return [",".join(gpus[i * per_worker : (i + 1) * per_worker]) for i in range(workers)]
