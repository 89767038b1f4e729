"""What every worker runs: the trainer's command line and environment.

Shared by the templates (pods) and `tflaunch local` (processes), so a local run is the same
program with the same flags and environment as a pod, only with other paths and addresses.
"""

from __future__ import annotations

from launcher.core import contract
from launcher.core.spec import MultiWorkerJob


def trainer_args(job: MultiWorkerJob, checkpoint_dir: str, model_dir: str) -> list[str]:
    """Arguments of `python -m trainer` for every worker of `job`."""
    trainer = job.spec.trainer
    args = [
        "--epochs", str(trainer.epochs),
        "--global-batch-size", str(trainer.global_batch_size),
        "--learning-rate", repr(trainer.learning_rate),
        "--save-freq", str(trainer.save_freq),
        "--checkpoint-dir", checkpoint_dir,
        "--model-dir", model_dir,
        "--expect-gpus", str(job.spec.gpus_per_worker),
        "--rendezvous-timeout", str(trainer.rendezvous_timeout_seconds),
        "--stall-timeout", str(trainer.stall_timeout_seconds),
    ]  # fmt: skip
    if trainer.collective_timeout_seconds is not None:
        args += ["--collective-timeout", str(trainer.collective_timeout_seconds)]
    if trainer.steps_per_epoch is not None:
        args += ["--steps-per-epoch", str(trainer.steps_per_epoch)]
    if trainer.data_path is not None:
        args += ["--data", trainer.data_path]
    return args + list(trainer.extra_args)


def trainer_env(job: MultiWorkerJob) -> dict[str, str]:
    """Environment of every worker, apart from TF_CONFIG and WORKER_INDEX."""
    return {**contract.TRAINER_ENV, **job.spec.env}


def pod_paths(job: MultiWorkerJob) -> tuple[str, str]:
    """(checkpoint dir, model dir) inside a pod: per job, on the checkpoint volume."""
    root = f"{job.spec.checkpoint.mount_path.rstrip('/')}/{job.name}"
    return f"{root}/backup", f"{root}/model"
