"""Click options shared by several commands, and turning them into a job spec (or a cluster).

Every spec field can be set from the command line: the common ones have their own flag, and
`--set path=value` reaches any field. Both are applied to the raw document before it is typed
and validated, so a bad flag gets the same one-line error as a bad file.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from launcher.api.spec import MultiWorkerJob
from launcher.core import keras_choice, program, script, script_lint, validation
from launcher.core.errors import SpecError
from launcher.core.load import load_job
from launcher.core.yamldoc import parse_assignment

if TYPE_CHECKING:  # the kubernetes client takes half a second to import: only when used
    from launcher.cluster.client import Cluster

F = TypeVar("F", bound=Callable[..., Any])

# flag name -> dotted path in the spec document
SPEC_FLAGS: dict[str, str] = {
    "name": "metadata.name",
    "namespace": "metadata.namespace",
    "image": "spec.image",
    "workers": "spec.workers",
    "gpus": "spec.gpusPerWorker",
    "layout": "spec.layout",
    "epochs": "spec.trainer.epochs",
    "global_batch_size": "spec.trainer.globalBatchSize",
    "steps_per_epoch": "spec.trainer.stepsPerEpoch",
    "script": "spec.script",
}


def spec_options(func: F) -> F:
    """SPEC argument plus the flags that override it."""
    decorators = [
        click.argument("spec_file", metavar="[SPEC]", required=False),
        click.option(
            "-f", "--filename", "spec_filename", metavar="FILE",
            help="The spec file, as kubectl's -f (the same as SPEC).",
        ),
        click.option("--name", help="metadata.name of the job."),
        click.option("-n", "--namespace", help="Kubernetes namespace."),
        click.option("--image", help="Trainer image."),
        click.option("--workers", type=int, help="Number of workers."),
        click.option("--gpus", type=int, help="GPUs per worker."),
        click.option("--layout", type=click.Choice(["indexed", "per-worker"]), help="Job layout."),
        click.option("--epochs", type=int, help="Training epochs."),
        click.option("--global-batch-size", type=int, help="Global batch (all replicas)."),
        click.option("--steps-per-epoch", type=int, help="Cap on steps per epoch."),
        click.option(
            "--script", metavar="FILE|DIR",
            help="Run your own training program instead of the built-in MNIST trainer: a "
            "file (with the modules beside it that it imports) or a directory (all its "
            "files, entry DIR/main.py); at most 1 MiB, mounted from a ConfigMap on a cluster.",
        ),
        click.option(
            "--set", "assignments", multiple=True, metavar="PATH=VALUE",
            help="Set any spec field, e.g. --set spec.trainer.stepsPerEpoch=100 (repeatable).",
        ),
    ]  # fmt: skip
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def job_from_options(
    spec_file: str | None, assignments: tuple[str, ...], *, local: bool = False, **flags: Any
) -> MultiWorkerJob:
    """Load SPEC (or the embedded default), apply --set, then the dedicated flags (`local`:
    for `tflaunch local`, `load_job`'s)."""
    overrides = [parse_assignment(a) for a in assignments]
    if flags.get("script") is not None:  # relative to where the user is, not to SPEC
        if spec_file is None and flags.get("name") is None:  # train_mnist.py -> train-mnist
            stem = re.sub(r"[^a-z0-9]+", "-", _program_stem(flags["script"])).strip("-")
            flags["name"] = stem if re.match(r"^[a-z]", stem) else f"job-{stem}".rstrip("-")
        flags["script"] = os.path.abspath(flags["script"])
    overrides += [(SPEC_FLAGS[k], v) for k, v in flags.items() if k in SPEC_FLAGS and v is not None]
    job = load_job(spec_file, overrides, local=local)
    program.check_overrides(job.spec, [path for path, _ in overrides])
    return job


def _program_stem(path: str) -> str:
    """What names a job after its program: a file's stem, but the directory's name for a
    directory or its main.py (`--script mnist_tutorial/main.py` -> mnist-tutorial)."""
    program = Path(os.path.abspath(path))
    if program.name in script.ENTRY_NAMES or program.is_dir():
        program = program.parent if not program.is_dir() else program
        return program.name.lower()
    return program.stem.lower()


def script_warnings(job: MultiWorkerJob) -> list[str]:
    """`script_lint.warnings` as the CLI says them, before anything starts (the program still
    runs)."""
    if job.spec.entrypoint == "image":
        return [entrypoint_note()]
    if job.spec.script is None:
        return []
    return [
        f"tflaunch: warning: {warning}"
        for warning in script_lint.warnings(job.spec.script, job.spec.workers)
    ]


def entrypoint_note() -> str:
    """The one line for spec.entrypoint: image: which guarantees hold, which do not."""
    return f"tflaunch: note: spec.entrypoint: image {program.IMAGE_ENTRYPOINT_GUARANTEES}"


def keras_note(job: MultiWorkerJob) -> str | None:
    """Which Keras a program of the user's runs on and why, in one line; None for the built-in
    trainer (always tf-keras)."""
    if not program.own_program(job.spec):
        return None
    return keras_choice.choose(job.spec).sentence()


def pop_spec_flags(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove the spec flags from a command's kwargs (the rest are the command's own)."""
    return {k: kwargs.pop(k) for k in list(kwargs) if k in SPEC_FLAGS}


def cluster_options(func: F) -> F:
    """kubectl's connection flags."""
    decorators = [
        click.option("--kubeconfig", type=click.Path(dir_okay=False), help="Path to a kubeconfig."),
        click.option("--context", "kube_context", help="kubeconfig context to use."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def namespace_option(func: F) -> F:
    """`-n/--namespace` of the commands that take a job NAME (default: the context's)."""
    return click.option(
        "-n",
        "--namespace",
        callback=_valid_namespace,
        help="Namespace of the job (default: the kubeconfig context's).",
    )(func)


def _valid_namespace(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse a name no namespace can have before it reaches a URL or a selector."""
    if value is not None:
        try:
            validation.check_namespace(value, "")
        except SpecError as error:
            raise click.BadParameter(error.message, ctx=ctx, param=param) from None
    return value


def connect(kubeconfig: str | None, kube_context: str | None) -> Cluster:
    """The cluster of `cluster_options`' --kubeconfig and --context (imports the client)."""
    from launcher.cluster import client

    def notify(message: str) -> None:
        click.echo(f"{program_name()}: {message}", err=True)

    return client.connect(kubeconfig, kube_context, notify=notify)


def one_spec_file(argument: str | None, flag: str | None) -> str | None:
    """SPEC or `-f/--filename` (kubectl's spelling); both at once is a usage error."""
    if argument is not None and flag is not None:
        raise click.UsageError(
            f"the spec is given twice ({flag} by -f/--filename and {argument} as SPEC); "
            "give one of them"
        )
    spec_file = flag if flag is not None else argument
    if spec_file is not None and spec_file.isdigit() and not os.path.exists(spec_file):
        # `tflaunch tfconfig 1`, `tflaunch local 2`: an index or a count where SPEC goes
        context = click.get_current_context(silent=True)
        meant = (
            f"--index {spec_file} picks the worker"
            if context is not None and context.info_name == "tfconfig"
            else f"--workers {spec_file} sets the number of workers"
        )
        raise click.UsageError(f"SPEC: {spec_file} is a number, not a spec file; {meant}")
    return spec_file


def split_program_args(
    spec_file: str | None, program_args: tuple[str, ...], spec_filename: str | None = None
) -> tuple[str | None, tuple[str, ...]]:
    """After `--` every word is positional, so with no SPEC click hands the first program
    flag to SPEC: `tflaunch render -- --seed 1`. A SPEC never starts with '-' (but '-').
    With `-f FILE` naming the spec, every positional word is the program's."""
    if spec_file is not None and (
        spec_filename is not None or (spec_file.startswith("-") and spec_file != "-")
    ):
        return None, (spec_file, *program_args)
    return spec_file, program_args


def program_args_option(func: F) -> F:
    """`-- ARGS` after SPEC: appended to spec.args, as `tflaunch local -- ARGS` hands them to
    the program (`with_spec`)."""
    return click.argument("program_args", nargs=-1, metavar="[-- PROGRAM_ARGS...]")(func)


def with_spec(func: Callable[..., Any], *, local: bool = False) -> Callable[..., Any]:
    """Turn the spec arguments into a `job` keyword for the command body (`local`: see
    `load_job`; `with_local_spec`), with the words after `--` appended to spec.args where
    the command takes them (`program_args_option`)."""

    @functools.wraps(func)
    def wrapper(
        spec_file: str | None,
        spec_filename: str | None,
        assignments: tuple[str, ...],
        **kwargs: Any,
    ) -> Any:
        flags = pop_spec_flags(kwargs)
        extra: tuple[str, ...] = ()
        if "program_args" in kwargs:
            # A word that is not a flag beside -f FILE stays SPEC: two specs, a usage error.
            spec_file, extra = split_program_args(spec_file, kwargs.pop("program_args"))
        spec_file = one_spec_file(spec_file, spec_filename)
        job = job_from_options(spec_file, assignments, local=local, **flags)
        if extra:
            if not program.own_program(job.spec):
                raise SpecError(
                    "PROGRAM_ARGS",
                    "the built-in trainer takes its settings from the spec: use its flags "
                    "(--epochs ...) or --set spec.trainer.FIELD=VALUE; words after -- go to a "
                    "program of yours (--script FILE or spec.command)",
                )
            args = json.dumps([*job.spec.args, *extra])
            job = job_from_options(
                spec_file, (*assignments, f"spec.args={args}"), local=local, **flags
            )
        return func(job=job, **kwargs)

    return wrapper


def with_local_spec(func: Callable[..., Any]) -> Callable[..., Any]:
    """`with_spec` for `tflaunch local`: a spec without spec.image loads (no image runs)."""
    return with_spec(func, local=True)


def program_name() -> str:
    """How the user called us: `kubectl tflaunch` through the kubectl plugin, else `tflaunch`."""
    invoked = os.path.basename(sys.argv[0] if sys.argv else "")
    return "kubectl tflaunch" if invoked.startswith("kubectl-") else "tflaunch"
