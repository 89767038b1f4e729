"""The numbers every worker must agree on, computed once before training starts."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
    """Derived from the flags, the cluster and the data; identical on every worker."""

    workers: int
    replicas: int
    """Replicas in sync: workers x (GPUs per worker, or 1 CPU replica)."""
    gpus_per_worker: int
    global_batch_size: int
    per_replica_batch: int
    steps_per_epoch: int
    eval_batch_size: int
    """The evaluation's global batch (`data.eval_batch_size`)."""
    eval_steps: int
    threads: int
    """Intra/inter-op threads per worker, 0 for TensorFlow's default."""
