"""`tflaunch operator`: run the MultiWorkerJob controller (kopf) in the foreground.

kopf is the optional `operator` extra, imported only when this command runs, so that the
rest of the CLI works without it and says how to install it when it is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from launcher.cli.options import cluster_options, connect
from launcher.core.errors import ExitStatus, TflaunchError

if TYPE_CHECKING:  # prometheus_client: only when --metrics-address is given
    from launcher.operator.metrics import OperatorMetrics

DEFAULT_LIVENESS = "http://0.0.0.0:8080/healthz"


class KopfMissing(TflaunchError):
    """The operator extra is not installed."""

    exit_status = ExitStatus.BAD_INPUT


def split_namespaces(values: tuple[str, ...]) -> tuple[str, ...]:
    """`-n a -n b`, `-n a,b` and TFLAUNCH_OPERATOR_NAMESPACES="a,b" (or "a b") alike."""
    return tuple(n for value in values for n in value.replace(",", " ").split())


@click.command("operator")
@click.option(
    "-n",
    "--namespace",
    "namespaces",
    multiple=True,
    metavar="NAMESPACE",
    envvar="TFLAUNCH_OPERATOR_NAMESPACES",
    callback=lambda _ctx, _param, values: split_namespaces(values),
    help="Serve MultiWorkerJobs in this namespace (repeatable, or comma-separated in "
    "$TFLAUNCH_OPERATOR_NAMESPACES); default: the context's.",
)
@click.option(
    "-A", "--all-namespaces", is_flag=True, help="Serve MultiWorkerJobs in every namespace."
)
@click.option(
    "--liveness",
    default=DEFAULT_LIVENESS,
    show_default=True,
    metavar="URL",
    help="Serve kopf's health endpoint here (for the Deployment's livenessProbe); '' for none.",
)
@click.option(
    "--metrics-address",
    default="",
    metavar="HOST:PORT",
    help="Serve Prometheus metrics on /metrics here, e.g. 0.0.0.0:8081 (the Deployment's); "
    "default: none.",
)
@click.option(
    "--leader-elect",
    is_flag=True,
    help="Act only while holding the Lease tflaunch-operator (for more than one replica).",
)
@click.option(
    "--lease-namespace",
    envvar=["TFLAUNCH_LEASE_NAMESPACE", "POD_NAMESPACE"],
    metavar="NAMESPACE",
    help="Namespace of the leader Lease (default: $POD_NAMESPACE, else the context's).",
)
@click.option(
    "--allowed-priority-classes",
    metavar="NAMES",
    help="spec.priorityClassName values a MultiWorkerJob may use, comma-separated ('' none, "
    "'*' any); default: any. The chart passes its tenancy.priorityClassNames.",
)
@click.option(
    "--allowed-toleration-keys",
    metavar="KEYS",
    help="Taint keys spec.tolerations may name ('' none, '*' any, which also allows an empty "
    "key); default: any.",
)
@click.option(
    "--allowed-node-labels",
    metavar="KEYS",
    help="Node label keys spec.nodeSelector and spec.affinity.nodeAffinity may use ('' none, "
    "'*' any); default: any.",
)
@click.option(
    "--tfjobs",
    type=click.Choice(["off", "managed", "all"]),
    default="off",
    show_default=True,
    help="Serve Kubeflow TFJobs (kubeflow.org/v1) too: managed, those whose "
    "runPolicy.managedBy is tflaunch.dev/operator; all, also those that name no controller "
    "(where no training-operator runs). Needs the TFJob CRD.",
)
@click.option("-v", "--verbose", is_flag=True, help="Log every handler call (kopf debug).")
@cluster_options
def operator_command(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    liveness: str,
    metrics_address: str,
    leader_elect: bool,
    lease_namespace: str | None,
    allowed_priority_classes: str | None,
    allowed_toleration_keys: str | None,
    allowed_node_labels: str | None,
    tfjobs: str,
    verbose: bool,
    kubeconfig: str | None,
    kube_context: str | None,
) -> None:
    """Run the operator: `kubectl apply -f` a MultiWorkerJob and it runs as a job.

    Creates each MultiWorkerJob's Service, NetworkPolicy and Jobs (the same objects as
    `tflaunch render`), restarts the whole worker group when a worker fails, and keeps the
    resource's status and events current. Needs the CRD (manifests/operator/crd.yaml).

    \b
    Examples:
      tflaunch operator --all-namespaces
      tflaunch operator -A --metrics-address 0.0.0.0:8081   # Prometheus: /metrics
      tflaunch operator -n team-a,team-b --leader-elect     # namespaced, 2 replicas
    """
    if namespaces and all_namespaces:
        raise click.UsageError("--namespace and --all-namespaces exclude each other")
    try:
        from launcher.operator import controller  # imports kopf
    except ImportError:
        raise KopfMissing(
            "the operator needs kopf, which is not installed: pip install 'tflaunch[operator]'"
        ) from None
    metrics = _metrics(metrics_address) if metrics_address else None
    cluster = connect(kubeconfig, kube_context)
    served = list(namespaces) or ([] if all_namespaces else [cluster.namespace])
    _logging(verbose)
    if metrics is not None:
        cluster.error_observers.append(metrics.api_error)
        try:
            metrics.serve(metrics_address)
        except OSError as error:
            raise click.BadParameter(
                f"cannot serve metrics on {metrics_address}: {error.strerror or error}; "
                "choose a free port",
                param_hint="--metrics-address",
            ) from None
    elector = None
    if leader_elect:
        from launcher.operator import leader

        elector = leader.Elector(
            cluster, lease_namespace or cluster.namespace, leader.new_identity()
        )
    from launcher.operator.tenancy import Allowlist

    policy = Allowlist.parse(allowed_priority_classes, allowed_toleration_keys, allowed_node_labels)
    controller.run(
        cluster,
        served,
        clusterwide=all_namespaces,
        liveness=liveness or None,
        metrics=metrics,
        elector=elector,
        policy=policy,
        tfjob_mode=tfjobs,
    )


def _metrics(address: str) -> OperatorMetrics:
    """The metrics registry, checked before anything connects or binds."""
    try:
        from launcher.operator.metrics import OperatorMetrics, parse_address
    except ImportError:
        raise KopfMissing(
            "--metrics-address needs prometheus_client, which is not installed: "
            "pip install 'tflaunch[operator]'"
        ) from None
    try:
        parse_address(address)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--metrics-address") from None
    return OperatorMetrics()


def _logging(verbose: bool) -> None:
    import logging

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


COMMANDS = (operator_command,)
