"""The coordination service's heartbeat timeout: how soon a dead peer is noticed.

Under MultiWorkerMirroredStrategy TensorFlow (2.21) runs a coordination service on worker 0;
every worker heartbeats to it, and a worker silent for the heartbeat timeout (TensorFlow's
default: 10 s) is declared dead, which aborts every collective with UnavailableError and
the trainer exits 1 so the group restarts. Measured here: a killed non-chief is noticed
after ~8.5 s by default (docs/performance.md). A shorter timeout notices sooner, but a
worker starved of CPU for that long (an overloaded node, a long GC or swap) is then taken
for dead too, so the default stays TensorFlow's.

MWMS configures the service only if nobody did before; `configure` does it first, with the
same jobs MWMS would use, only adding the timeout. It uses TensorFlow's context API
(`configure_coordination_service`), which MWMS itself calls.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

LEADER = "/job:worker/replica:0/task:0"
"""Where MWMS puts the service for a cluster of workers only (multi_worker_util)."""


def configure(num_workers: int, timeout_seconds: float) -> None:
    """Set the heartbeat timeout before the strategy exists (0 or 1 worker: no-op)."""
    if not timeout_seconds or num_workers < 2:
        return
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.eager import context

    if context.context().coordination_service is not None:
        log.warning("coordination service already configured; heartbeat timeout unchanged")
        return
    context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=LEADER,
        heartbeat_timeout_in_ms=int(timeout_seconds * 1000),
        coordinated_jobs=[
            coordination_config_pb2.CoordinatedJob(name="worker", num_tasks=num_workers)
        ],
    )
    log.info("coordination service heartbeat timeout: %.1fs", timeout_seconds)
