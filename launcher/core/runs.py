"""Checkpoint runs: which run's checkpoints a job's workers write and resume from.

Checkpoints on a shared claim live under `<mountPath>/<job>/<run>/` (`workload.pod_paths`).
A run is one submission: its group restarts resume from it, a new submission under the same
name starts afresh, and continuing an earlier run is an explicit choice (spec.checkpoint.run
naming it). Who picks the run:

* `tflaunch submit`: the Job's uid is unknown until the Job exists, and a per-worker layout
  has one Job per worker, so the CLI generates an id at the first submit and keeps it (the
  Jobs' `labels.CHECKPOINT_RUN` annotation) across unchanged resubmits; `--replace` is a new
  submission, so a new run.
* the operator: the MultiWorkerJob's uid, the same for all of its group restarts.
"""

from __future__ import annotations

import dataclasses
import datetime
import secrets

from launcher.api.spec import MultiWorkerJob


def new_run_id(now: datetime.datetime | None = None) -> str:
    """A fresh run id that sorts by time, e.g. 20261130-174512-3f2a."""
    moment = now or datetime.datetime.now(datetime.timezone.utc)
    return f"{moment.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def with_run(job: MultiWorkerJob, run: str) -> MultiWorkerJob:
    """`job` writing the checkpoints of `run`, unless its spec names a run already."""
    if job.spec.checkpoint.run or not run:
        return job
    checkpoint = dataclasses.replace(job.spec.checkpoint, run=run)
    return dataclasses.replace(job, spec=dataclasses.replace(job.spec, checkpoint=checkpoint))
