"""Checkpoint runs: the path is keyed by the run, a new id is a valid spec.checkpoint.run,
and a run named in the spec always wins."""

from __future__ import annotations

import dataclasses
import datetime

from launcher.api import spec
from launcher.core import load, runs, workload


def _job(**checkpoint: object) -> spec.MultiWorkerJob:
    job = load.load_job("examples/mnist.yaml")
    point = dataclasses.replace(job.spec.checkpoint, **checkpoint)
    return dataclasses.replace(job, spec=dataclasses.replace(job.spec, checkpoint=point))


def test_the_checkpoint_and_model_paths_are_keyed_by_the_run() -> None:
    job = runs.with_run(_job(), "abc")

    assert workload.pod_paths(job) == (
        "/checkpoints/mnist/abc/backup",
        "/checkpoints/mnist/abc/model",
    )


def test_a_new_run_id_sorts_by_time_and_is_a_valid_spec_value() -> None:
    moment = datetime.datetime(2026, 11, 30, 17, 45, 12, tzinfo=datetime.timezone.utc)
    run = runs.new_run_id(moment)

    assert run.startswith("20261130-174512-") and len(run) == len("20261130-174512-3f2a")
    job = load.load_job("examples/mnist.yaml", [("spec.checkpoint.run", run)])
    assert job.spec.checkpoint.run == run


def test_a_run_named_in_the_spec_wins_over_the_one_offered() -> None:
    job = runs.with_run(_job(run="earlier"), "new")

    assert job.spec.checkpoint.run == "earlier"
    assert runs.with_run(_job(), "").spec.checkpoint.run is None
