"""`tflaunch local`: the job's workers as processes on this machine (`launcher.local`)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click

from launcher.api.spec import MultiWorkerJob
from launcher.cli.options import keras_note, script_warnings, spec_options, with_local_spec
from launcher.cli.options import split_program_args as split_trainer_args
from launcher.core import contract, workload
from launcher.core.errors import SpecError
from launcher.core.program import own_program
from launcher.local.isolation import NETWORK_CHOICES

# tflaunch local's own option for a trainer flag the spec sets (else: --set FIELD=VALUE).
LOCAL_FLAGS = {
    "--epochs": "tflaunch local --epochs N",
    "--global-batch-size": "tflaunch local --global-batch-size N",
    "--steps-per-epoch": "tflaunch local --steps-per-epoch N",
    "--data": "tflaunch local --data PATH",
    "--checkpoint-dir": "tflaunch local --workdir DIR",
    "--model-dir": "tflaunch local --workdir DIR",
    "--tensorboard-dir": "tflaunch local --workdir DIR",
    "--expect-gpus": "tflaunch local --gpus N",
}


def _trainer_args_after_double_dash(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(spec_file: str | None, trainer_args: tuple[str, ...], **kwargs: Any) -> Any:
        spec_file, trainer_args = split_trainer_args(
            spec_file, trainer_args, kwargs.get("spec_filename")
        )
        return func(spec_file=spec_file, trainer_args=trainer_args, **kwargs)

    return wrapper


@click.command("local")
@spec_options
@click.option(
    "--data",
    metavar="PATH",
    help="mnist.npz in Keras' format (default: "
    "$TFLAUNCH_DATA, else Keras' cached download in ~/.keras/datasets).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Checkpoints, model and result.json (default: ./tflaunch-runs/NAME).",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Show every line of every worker, prefixed [worker i], TensorFlow's own log lines "
    "(C++ warnings, INFO) included, instead of the progress bar; they are always in "
    f"WORKDIR/logs/. Same as {contract.ENV_LOG_LEVEL}={contract.LOG_LEVEL_DEBUG}.",
)
@click.option(
    "--network",
    type=click.Choice(NETWORK_CHOICES),
    default="private",
    show_default=True,
    help="private: the workers run in their own network namespace with only loopback, "
    "so their TensorFlow servers (which listen on every interface) cannot be reached from "
    "the network; host: this machine's network, for a program that needs it (downloads, "
    "remote storage), with its servers reachable by anyone who can reach this machine.",
)
@click.argument("trainer_args", nargs=-1, metavar="[-- PROGRAM_ARGS...]")
@_trainer_args_after_double_dash
@with_local_spec
def local_command(
    job: MultiWorkerJob,
    data: str | None,
    workdir: Path | None,
    verbose: bool,
    network: str,
    trainer_args: tuple[str, ...],
) -> None:
    """Train on this machine: the job's workers as local processes, same TF_CONFIG builder.

    Every worker runs through the worker wrapper, as in a pod: preflight, then the built-in
    MNIST trainer or your own program (--script FILE, or spec.command); words after `--`
    go to that program. A failed worker restarts the whole group, resuming from the
    checkpoint, up to spec.backoffLimit times. On a terminal: one progress bar (epoch, step,
    loss, images/s, ETA) and a status line per worker; any worker's warnings and errors above
    it; NO_COLOR is respected. Needs the trainer extra: pip install 'tflaunch[trainer]'.

    \b
    Examples:
      tflaunch local --workers 2
      tflaunch local examples/mnist.yaml --data ~/mnist.npz --epochs 1
      tflaunch local --workers 2 -- --max-train-examples 6000
      tflaunch local --verbose              # TensorFlow's own log lines too
      tflaunch local --script train.py --workers 2 -- --epochs 2   # your own program
    """
    from launcher.local import dataset, display, gpus, paths, runner

    if data is not None and not Path(data).is_file():
        raise click.BadParameter(
            f"{data} is not a file; pass the path of an mnist.npz", param_hint="--data"
        )
    if job.spec.entrypoint == "image":
        raise SpecError(
            "spec.entrypoint",
            "image runs only in pods (local mode cannot read the image's ENTRYPOINT): write "
            "the program as command (a TFJob container's command), e.g. [python, /train.py]",
        )
    # each worker's own GPUs, or a refusal before the data is fetched or anything starts
    gpu_slices = gpus.assign(
        job.spec.workers, job.spec.gpus_per_worker, *gpus.visible_gpus(os.environ)
    )
    own = own_program(job.spec)
    owned = None if own else workload.spec_owned_flag(trainer_args)
    if owned:
        flag, field = owned
        fix = LOCAL_FLAGS.get(flag, f"--set {field}=VALUE")
        raise click.UsageError(
            f"{flag} after -- would override {field} behind tflaunch's back; use {fix} instead"
        )
    if not own:  # a program of the user's brings its own data
        choice = dataset.resolve_mnist(data, os.environ)
        if choice.notice:
            click.echo(choice.notice)
        data = choice.path
    workdir = workdir or Path("tflaunch-runs") / job.name
    for line in program_warnings(job, os.environ):
        click.echo(line, err=True)
    if job.spec.script is not None:
        what = f"your script {job.spec.script.name}"
    elif own:
        what = "your program " + " ".join(job.spec.command)
    else:
        what = f"global batch {job.spec.trainer.global_batch_size}"
    click.echo(
        f"tflaunch: {job.name}: {job.spec.workers} local worker(s), {what}, workdir {workdir} "
        f"(full worker logs in {paths.LocalPaths(workdir).logs_dir})"
    )
    note = keras_note(job)
    if note:
        click.echo(f"tflaunch: {job.name}: {note}")
    verbose = verbose or contract.debug_requested(os.environ)
    console = display.make_console(
        job.name, job.spec.workers, sys.stdout, verbose, own_program=own
    )  # an own program's output shows; its progress bar too, with trainer.progress's callback
    result = runner.run_local(
        job, workdir, data, trainer_args, console=console, network=network, gpu_slices=gpu_slices
    )
    if own:
        saved = f"; model dir {result['model_dir']}" if result.get("model_dir") else ""
        if result.get("workers_dir"):  # what the program wrote to its working directory
            saved += f"; each worker's own files in {result['workers_dir']}/worker-<i>"
        click.echo(
            f"tflaunch: {job.name} succeeded on all {job.spec.workers} worker(s): "
            f"restarts={result.get('restarts')}{saved}"
        )
        return
    trained_on = contract.DATASET_NAMES.get(str(result.get("dataset")), "unnamed data")
    click.echo(
        f"tflaunch: {job.name} succeeded on {trained_on}: "
        f"test_accuracy={result.get('test_accuracy'):.4f} "
        f"({result.get('test_examples', '?')} test images) "
        f"images/s={result.get('images_per_sec', 0):.0f} restarts={result.get('restarts')} "
        f"-> {paths.LocalPaths(workdir).result_file}"
    )
    phases = result.get("phases")
    if verbose and isinstance(phases, dict) and phases:
        click.echo(f"tflaunch: {job.name}: chief's phases: {phase_line(phases)}")


def phase_line(phases: dict[str, object]) -> str:
    """result.json's `phases` in one line, in the order they happen:
    `import 5.1s, strategy 0.9s, ..., total 21.3s`."""
    return ", ".join(
        f"{name} {phases[name]:.1f}s"
        for name in (*contract.RESULT_PHASES, "total")
        if isinstance(phases.get(name), (int, float))
    )


def program_warnings(job: MultiWorkerJob, env: Mapping[str, str]) -> list[str]:
    """What to change before the workers start: a TF_USE_LEGACY_KERAS of the user's that
    the workers will not use, and what `script_warnings` finds in the program."""
    lines = []
    legacy = env.get(contract.ENV_LEGACY_KERAS)
    chosen = workload.tflaunch_env(job)[contract.ENV_LEGACY_KERAS]
    if legacy is not None and legacy != chosen:
        lines.append(
            f"tflaunch: note: {contract.ENV_LEGACY_KERAS}={legacy} from your environment is not "
            f"used: every worker runs with {contract.ENV_LEGACY_KERAS}={chosen}, as in a pod "
            "(spec.keras chooses the Keras: auto, tf-keras or keras3)"
        )
    return [*lines, *script_warnings(job)]


COMMANDS = (local_command,)
