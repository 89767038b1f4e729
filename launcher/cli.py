"""The `tflaunch` command: parses flags, calls the core, maps errors to exit codes.

`main()` is the only place that turns an exception into a message and an exit code;
`cli` (the click group) is the program without error handling, as in httpie's core.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from launcher import __version__, cluster_cli, operator_cli
from launcher.core import render, tfconfig
from launcher.core.errors import ExitStatus, TflaunchError
from launcher.core.spec import MultiWorkerJob
from launcher.options import program_name, spec_options, with_spec


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "TFLAUNCH"}
)
@click.version_option(__version__, prog_name="tflaunch")
def cli() -> None:
    """Run TensorFlow MultiWorkerMirroredStrategy training on Kubernetes (or locally).

    \b
    Examples:
      tflaunch local --workers 2                 # train MNIST on this machine
      tflaunch render examples/mnist.yaml | kubectl apply -f -
      tflaunch submit examples/mnist.yaml --wait
    """


@cli.command("render")
@spec_options
@click.option(
    "-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True
)
@click.option(
    "--out-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write one file per object here instead of stdout.",
)
@with_spec
def render_command(job: MultiWorkerJob, output: str, out_dir: Path | None) -> None:
    """Render the job's Kubernetes objects (Service, NetworkPolicy, Jobs).

    \b
    Example:
      tflaunch render examples/mnist.yaml --workers 4 --gpus 1 | kubectl apply -f -
    """
    objects = render.render(job)
    if out_dir is not None:
        for path in render.write_out_dir(objects, out_dir):
            click.echo(str(path))
        return
    click.echo(render.to_json(objects) if output == "json" else render.to_yaml(objects), nl=False)


@cli.command("tfconfig")
@spec_options
@click.option("--index", type=int, help="Worker index; default: every worker, one per line.")
@with_spec
def tfconfig_command(job: MultiWorkerJob, index: int | None) -> None:
    """Print the TF_CONFIG that worker INDEX receives in the cluster.

    \b
    Example:
      tflaunch tfconfig examples/mnist.yaml --index 1
    """
    if index is not None and not 0 <= index < job.spec.workers:
        raise click.BadParameter(
            f"must be between 0 and {job.spec.workers - 1} (spec.workers is {job.spec.workers})",
            param_hint="--index",
        )
    indices = range(job.spec.workers) if index is None else [index]
    for i in indices:
        click.echo(json.dumps(tfconfig.job_tf_config(job, i)))


@cli.command("validate")
@spec_options
@click.option(
    "--kubernetes-version",
    metavar="X.Y",
    help="Validate against this Kubernetes version's schemas (default: newest known).",
)
@click.option("--no-schema", is_flag=True, help="Only the static checks, no schema validation.")
@with_spec
def validate_command(job: MultiWorkerJob, kubernetes_version: str | None, no_schema: bool) -> None:
    """Check the spec and validate the rendered objects against Kubernetes' schemas.

    \b
    Example:
      tflaunch validate examples/mnist.yaml --kubernetes-version 1.29
    """
    from launcher.core import schemas  # optional dependency, only needed here

    objects = render.render(job)
    if no_schema:
        click.echo(f"ok: {job.name}: spec valid, {len(objects)} objects rendered")
        return
    version = kubernetes_version or schemas.latest_kubernetes_version()
    schemas.validate_objects(objects, version)
    click.echo(f"ok: {job.name}: {len(objects)} objects valid against Kubernetes {version} schemas")


def split_trainer_args(
    spec_file: str | None, trainer_args: tuple[str, ...]
) -> tuple[str | None, tuple[str, ...]]:
    """After `--` every word is positional, so with no SPEC click hands the first trainer
    flag to SPEC: `tflaunch local -- --seed 1`. A SPEC never starts with '-' (but '-')."""
    if spec_file is not None and spec_file.startswith("-") and spec_file != "-":
        return None, (spec_file, *trainer_args)
    return spec_file, trainer_args


def _trainer_args_after_double_dash(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(spec_file: str | None, trainer_args: tuple[str, ...], **kwargs: Any) -> Any:
        spec_file, trainer_args = split_trainer_args(spec_file, trainer_args)
        return func(spec_file=spec_file, trainer_args=trainer_args, **kwargs)

    return wrapper


@cli.command("local")
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
@click.argument("trainer_args", nargs=-1, metavar="[-- TRAINER_ARGS...]")
@_trainer_args_after_double_dash
@with_spec
def local_command(
    job: MultiWorkerJob,
    data: str | None,
    workdir: Path | None,
    trainer_args: tuple[str, ...],
) -> None:
    """Train on this machine: the job's workers as local processes, same TF_CONFIG builder.

    A failed worker restarts the whole group, resuming from the checkpoint, up to
    spec.backoffLimit times. Needs the trainer extra: pip install 'tflaunch[trainer]'.

    \b
    Examples:
      tflaunch local --workers 2
      tflaunch local examples/mnist.yaml --data ~/mnist.npz --epochs 1
      tflaunch local --workers 2 -- --max-train-examples 6000
    """
    from launcher.local import dataset, runner

    if data is not None and not Path(data).is_file():
        raise click.BadParameter(
            f"{data} is not a file; pass the path of an mnist.npz", param_hint="--data"
        )
    data = dataset.resolve_mnist(data, os.environ)
    workdir = workdir or Path("tflaunch-runs") / job.name
    click.echo(
        f"tflaunch: {job.name}: {job.spec.workers} local worker(s), "
        f"global batch {job.spec.trainer.global_batch_size}, workdir {workdir}"
    )
    result = runner.run_local(job, workdir, data, trainer_args, write=click.echo)
    click.echo(
        f"tflaunch: {job.name} succeeded: test_accuracy={result.get('test_accuracy'):.4f} "
        f"images/s={result.get('images_per_sec', 0):.0f} restarts={result.get('restarts')} "
        f"-> {runner.LocalPaths(workdir).result_file}"
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())


def run(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code. Every failure becomes one line on stderr."""
    try:
        result: Any = cli.main(args=argv, prog_name=program_name(), standalone_mode=False)
    except click.exceptions.Exit as stop:
        return int(stop.exit_code)
    except click.exceptions.Abort:
        click.echo("tflaunch: interrupted", err=True)
        return ExitStatus.INTERRUPTED
    except KeyboardInterrupt:
        click.echo("tflaunch: interrupted", err=True)
        return ExitStatus.INTERRUPTED
    except click.ClickException as error:
        context = getattr(error, "ctx", None)
        command = context.command_path if context is not None else program_name()
        hint = f" (see '{command} --help')" if isinstance(error, click.UsageError) else ""
        click.echo(f"{command}: error: {_one_line(error.format_message())}{hint}", err=True)
        return ExitStatus.BAD_INPUT
    except TflaunchError as error:
        click.echo(f"{program_name()}: error: {_one_line(str(error))}", err=True)
        return int(error.exit_status)
    except BrokenPipeError:
        return ExitStatus.SUCCESS  # `tflaunch render | head`
    except Exception as error:  # a bug: still one line, the traceback only on request
        if os.environ.get("TFLAUNCH_DEBUG"):
            raise
        click.echo(
            f"tflaunch: internal error: {type(error).__name__}: {_one_line(str(error))} "
            "(rerun with TFLAUNCH_DEBUG=1 for the traceback, and please report it)",
            err=True,
        )
        return ExitStatus.ERROR
    return int(result) if isinstance(result, int) else ExitStatus.SUCCESS


def main() -> None:
    sys.exit(run())


cluster_cli.register(cli)  # submit, status, logs, wait, delete, list, doctor
operator_cli.register(cli)  # operator (needs the kopf extra only when run)
