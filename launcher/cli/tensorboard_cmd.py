"""`tflaunch tensorboard NAME`: TensorBoard on a job's event files, local or on a cluster.

A local run (`tflaunch local`) keeps them in `WORKDIR/tensorboard`: TensorBoard runs here
(the optional `tensorboard` extra, as a subprocess: the launcher never imports TensorFlow).
A job on a cluster keeps them on its checkpoint claim: a small TensorBoard pod mounts the
claim read-only (hardened like the workers, owned by the job, so it goes with it) and this
command forwards a local port to it through the API server, like `kubectl port-forward`.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import TextIO

import click

from launcher.cli.durations import DURATION, EXAMPLE
from launcher.cli.options import cluster_options, connect, namespace_option, program_name
from launcher.core import contract, tensorboard
from launcher.core.errors import ExitStatus, NotFound, SpecError, TflaunchError

DEFAULT_TIMEOUT = 300.0


class TensorBoardMissing(TflaunchError):
    """TensorBoard is not installed here (a local run needs it)."""

    exit_status = ExitStatus.BAD_INPUT


def local_logdir(name: str, workdir: Path | None) -> Path | None:
    """The event files of local run `name`: `--workdir`'s, else the default workdir's when
    it exists; None: not a local run (look on the cluster)."""
    from launcher.local.paths import LocalPaths

    if workdir is not None:
        return LocalPaths(workdir).tensorboard_dir
    default = LocalPaths(Path("tflaunch-runs") / name)
    return default.tensorboard_dir if default.workdir.is_dir() else None


def serve_local(logdir: Path, port: int) -> int:
    """Run TensorBoard on `logdir` in the foreground until Ctrl-C."""
    if not logdir.is_dir():
        raise tensorboard.NoTensorBoard(
            f"no TensorBoard files in {logdir}: the chief writes them while `tflaunch local` "
            "trains; run it first, or pass the run's --workdir"
        )
    if importlib.util.find_spec("tensorboard") is None:
        raise TensorBoardMissing(
            "tflaunch tensorboard needs TensorBoard for a local run, which is not installed: "
            "pip install 'tflaunch[tensorboard]'"
        )
    if port == 0:
        with socket.socket() as probe:  # TensorBoard would pick one without telling us
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
    click.echo(f"TensorBoard on {logdir}: http://127.0.0.1:{port}/ (Ctrl-C stops it)", err=True)
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
               "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    debug = contract.debug_requested(os.environ)
    env = dict(os.environ)
    if not debug:  # TensorBoard needs no GPU: do not let TensorFlow probe CUDA and say so
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        env.setdefault("TF_ENABLED_DEVICE_TYPES", "CPU")
    process = subprocess.Popen(command, env=env, stderr=None if debug else subprocess.PIPE,
                               text=True, errors="replace")  # fmt: skip
    relay = None
    if process.stderr is not None:
        relay = threading.Thread(target=_without_cpp_lines, args=(process.stderr,), daemon=True)
        relay.start()
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.terminate()
        process.wait()
        return ExitStatus.SUCCESS
    finally:
        if relay is not None:
            relay.join(timeout=5)


def _without_cpp_lines(stream: TextIO) -> None:
    """TensorBoard's stderr without TensorFlow's C++ lines: those printed before
    TF_CPP_MIN_LOG_LEVEL applies (absl's banner, oneDNN, the CUDA stub) read like failures on
    a machine without GPUs, and TensorBoard itself needs none. TFLAUNCH_LOG_LEVEL=debug shows
    them."""
    for line in stream:
        if not contract.is_cpp_log_start(line):
            sys.stderr.write(line)
            sys.stderr.flush()


@click.command("tensorboard")
@click.argument("name")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="A local run's workdir (default: ./tflaunch-runs/NAME when it exists, else the job "
    "on the cluster).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=tensorboard.PORT,
    show_default=True,
    help="Local port for TensorBoard (0: any free one).",
)
@click.option(
    "--no-forward",
    is_flag=True,
    help="Cluster: only create the TensorBoard pod and say how to reach it.",
)
@click.option(
    "--timeout",
    type=DURATION,
    default=DEFAULT_TIMEOUT,
    show_default=True,
    metavar="DURATION",
    help=f"Cluster: how long the pod may take to become ready, {EXAMPLE}.",
)
@namespace_option
@cluster_options
def tensorboard_command(
    name: str,
    workdir: Path | None,
    port: int,
    no_forward: bool,
    timeout: float,
    namespace: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
) -> int:
    """Open TensorBoard on job NAME's event files (loss, accuracy, learning rate, images/s).

    A local run: TensorBoard here, on WORKDIR/tensorboard (pip install
    'tflaunch[tensorboard]'). A job on a cluster: a TensorBoard pod that mounts the job's
    checkpoint claim read-only (owned by the job), and a local port forwarded to it.

    \b
    Examples:
      tflaunch tensorboard mnist                 # after tflaunch local, or on the cluster
      tflaunch tensorboard mnist -n ml --port 0  # any free local port
    """
    logdir = local_logdir(name, workdir)
    if logdir is not None:
        return serve_local(logdir, port)
    try:
        cluster = connect(kubeconfig, kube_context)
    except SpecError as error:  # maybe a local run, looked for in the wrong directory
        raise SpecError(
            error.field,
            f"{error.message}; for a local run: no ./tflaunch-runs/{name} here, pass its --workdir",
        ) from None
    from launcher.cli.wait_cmd import not_found
    from launcher.cluster import client, portforward
    from launcher.cluster import tensorboard as remote

    ns = namespace or cluster.namespace
    try:
        pod = remote.ensure_pod(cluster, name, ns)
    except NotFound:
        raise not_found(name, ns) from None
    pod_name = pod["metadata"]["name"]
    click.echo(f"pod/{pod_name} applied: TensorBoard on job {name}'s checkpoint claim", err=True)
    if no_forward:
        click.echo(
            f"kubectl port-forward -n {ns} pod/{pod_name} {port or tensorboard.PORT}:"
            f"{tensorboard.PORT}   # or: {program_name()} tensorboard {name} -n {ns}"
        )
        return ExitStatus.SUCCESS
    remote.wait_ready(cluster, pod_name, ns, timeout)
    try:
        forwarder = portforward.Forwarder(
            lambda: client.port_forward(cluster, pod_name, ns, tensorboard.PORT),
            port=port,
            on_error=lambda message: click.echo(f"tflaunch: {message}", err=True),
        )
    except OSError as error:
        raise click.BadParameter(
            f"cannot listen on 127.0.0.1:{port} ({error.strerror or error}); "
            "pass another --port, or 0 for any free one",
            param_hint="--port",
        ) from None
    forwarder.start()
    click.echo(f"TensorBoard for job {name}: {forwarder.url} (Ctrl-C stops forwarding; the pod "
               f"goes with the job, or: kubectl delete pod {pod_name} -n {ns})")  # fmt: skip
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        forwarder.stop()
    return ExitStatus.SUCCESS


COMMANDS = (tensorboard_command,)
