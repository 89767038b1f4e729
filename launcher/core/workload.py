"""What every worker runs: the trainer's command line and environment.

Shared by the templates (pods) and `tflaunch local` (processes), so a local run is the same
program with the same flags and environment as a pod, only with other paths and addresses.
"""

from __future__ import annotations

from collections.abc import Sequence

from launcher.api.spec import MultiWorkerJob
from launcher.core import contract, keras_choice, script
from launcher.core.errors import SpecError
from launcher.core.program import own_program

PYTHON = "python"
"""The interpreter in the image; `tflaunch local` passes its own instead."""
DEFAULT_RENDEZVOUS_SECONDS = 300


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
        "--tensorboard-dir", tensorboard_dir(model_dir),
        "--expect-gpus", str(job.spec.gpus_per_worker),
        "--rendezvous-timeout", str(trainer.rendezvous_timeout_seconds),
        "--stall-timeout", str(trainer.stall_timeout_seconds),
    ]  # fmt: skip
    if trainer.collective_timeout_seconds is not None:
        args += ["--collective-timeout", str(trainer.collective_timeout_seconds)]
    if trainer.precision != "auto":
        args += ["--precision", trainer.precision]
    if trainer.jit_compile:
        args.append("--jit-compile")
    if trainer.heartbeat_timeout_seconds is not None:
        args += ["--heartbeat-timeout", str(trainer.heartbeat_timeout_seconds)]
    if trainer.steps_per_epoch is not None:
        args += ["--steps-per-epoch", str(trainer.steps_per_epoch)]
    if trainer.data_path is not None:
        args += ["--data", trainer.data_path]
    owned = spec_owned_flag(trainer.extra_args)
    if owned:
        raise SpecError(
            "spec.trainer.extraArgs",
            f"{owned[0]} is set from {owned[1]}; set that field instead",
        )
    return args + list(trainer.extra_args)


# The built-in trainer's flags that `trainer_args` renders from the spec. Given again in
# spec.trainer.extraArgs or after `tflaunch local --`, argparse would silently take the last
# one while everything else (the divisibility rules, status, the local header) goes on
# showing the spec's value.
SPEC_TRAINER_FLAGS = {
    "--epochs": "spec.trainer.epochs",
    "--global-batch-size": "spec.trainer.globalBatchSize",
    "--learning-rate": "spec.trainer.learningRate",
    "--save-freq": "spec.trainer.saveFreq",
    "--steps-per-epoch": "spec.trainer.stepsPerEpoch",
    "--data": "spec.trainer.dataPath",
    "--checkpoint-dir": "spec.checkpoint",
    "--model-dir": "spec.checkpoint",
    "--tensorboard-dir": "spec.checkpoint",
    "--expect-gpus": "spec.gpusPerWorker",
    "--rendezvous-timeout": "spec.trainer.rendezvousTimeoutSeconds",
    "--stall-timeout": "spec.trainer.stallTimeoutSeconds",
    "--collective-timeout": "spec.trainer.collectiveTimeoutSeconds",
    "--precision": "spec.trainer.precision",
    "--jit-compile": "spec.trainer.jitCompile",
    "--heartbeat-timeout": "spec.trainer.heartbeatTimeoutSeconds",
}


def spec_owned_flag(args: Sequence[str]) -> tuple[str, str] | None:
    """The first of `args` that the spec already sets, with the spec field that sets it; an
    abbreviation counts (`--epoch`: argparse would expand it to --epochs, and the trainer's
    parser refuses abbreviations too, in case a flag slips past this check)."""
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in SPEC_TRAINER_FLAGS:
            return flag, SPEC_TRAINER_FLAGS[flag]
        if flag.startswith("--") and len(flag) > 2:
            for owned, field in SPEC_TRAINER_FLAGS.items():
                if owned.startswith(flag):
                    return f"{flag} (short for {owned})", field
    return None


def tensorboard_dir(model_dir: str) -> str:
    """Where the chief writes TensorBoard event files: beside the model directory, i.e.
    `<mount>/<job>/<run>/tensorboard` on the checkpoint volume, `WORKDIR/tensorboard` locally
    (`tflaunch tensorboard` reads them there)."""
    return f"{model_dir.rstrip('/').rpartition('/')[0] or '.'}/tensorboard"


def tflaunch_env(job: MultiWorkerJob) -> dict[str, str]:
    """What tflaunch sets in every worker, pods and `tflaunch local` alike, apart from
    TF_CONFIG, WORKER_INDEX and the restart count (which differ between the two). A spec
    field that becomes a variable goes here: `launcher.core.pod_env` renders it, refuses it in
    spec.env, and `tflaunch local` sets it too."""
    return {**contract.TRAINER_ENV, contract.ENV_LEGACY_KERAS: keras_choice.choose(job.spec).legacy}


def trainer_env(job: MultiWorkerJob) -> dict[str, str]:
    """Environment of every worker, apart from TF_CONFIG and WORKER_INDEX: tflaunch's, then
    the user's spec.env."""
    return {**tflaunch_env(job), **job.spec.env}


def pod_paths(job: MultiWorkerJob) -> tuple[str, str]:
    """(checkpoint dir, model dir) inside a pod: per job and run, on the checkpoint volume.

    The one place these paths are made ($TFLAUNCH_CHECKPOINT_DIR and the trainer's flags
    come from here). Keyed by the run (spec.checkpoint.run, which `tflaunch submit` and the
    operator fill in: `launcher.core.runs`), so that a new submission under the same name on
    a shared claim never resumes another run's backup, while the group restarts of one run
    still do. Without a run (a bare `render.render`) the path is per job name only.
    """
    root = f"{job.spec.checkpoint.mount_path.rstrip('/')}/{job.name}"
    if job.spec.checkpoint.run:
        root = f"{root}/{job.spec.checkpoint.run}"
    return f"{root}/backup", f"{root}/model"


def program_command(
    job: MultiWorkerJob, python: str = PYTHON, script_dir: str = script.MOUNT_PATH
) -> list[str]:
    """What the wrapper runs: spec.command (or `python SCRIPT`) with spec.args."""
    spec = job.spec
    if spec.command:
        command = list(spec.command)
        if python != PYTHON and command[0] in ("python", "python3"):
            command[0] = python  # locally: the interpreter tflaunch (and TensorFlow) runs in
    elif spec.script is not None:
        command = [python, f"{script_dir.rstrip('/')}/{spec.script.name}"]
    else:
        return [python, *contract.BUILTIN_TRAINER[1:]]
    return [*command, *spec.args]


def worker_argv(
    job: MultiWorkerJob,
    checkpoint_dir: str,
    model_dir: str,
    python: str = PYTHON,
    script_dir: str = script.MOUNT_PATH,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """Every worker's whole command line: the wrapper, its preflight flags, `--`, the program.

    The built-in trainer gets its flags (`trainer_args`) and keeps its own stall watchdog,
    which knows its steps; a program of the user's gets the wrapper's (spec.stallTimeoutSeconds,
    no output and no checkpoint written for that long).
    """
    spec = job.spec
    if own_program(spec):
        rendezvous = spec.rendezvous_timeout_seconds or DEFAULT_RENDEZVOUS_SECONDS
        stall = spec.stall_timeout_seconds or 0
        program = program_command(job, python, script_dir)
    else:
        rendezvous = spec.trainer.rendezvous_timeout_seconds
        stall = 0
        program = [*program_command(job, python), *trainer_args(job, checkpoint_dir, model_dir)]
    return [
        python, "-m", contract.WRAPPER_MODULE,
        "--expect-gpus", str(spec.gpus_per_worker),
        "--rendezvous-timeout", str(rendezvous),
        "--stall-timeout", str(stall),
        "--checkpoint-dir", checkpoint_dir,
        "--model-dir", model_dir,
        "--", *program, *extra_args,
    ]  # fmt: skip
