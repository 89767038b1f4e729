"""`tflaunch doctor`: the usual causes of MultiWorkerMirroredStrategy failures, checked.

The checks are pure (`launcher.cluster.doctor`); this command reads what they need from the
cluster (a check whose reads RBAC forbids becomes a skip) and prints the checklist.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from launcher.cli import output
from launcher.cli.completion import job_name_argument
from launcher.cli.options import (
    cluster_options,
    connect,
    job_from_options,
    namespace_option,
    program_name,
)
from launcher.cluster import doctor as checks
from launcher.core import names, render
from launcher.core.errors import ExitStatus


def _mark(outcome: str) -> str:
    encoding = (getattr(sys.stdout, "encoding", None) or "ascii").lower()
    fancy = encoding.startswith("utf")
    return {
        "ok": "✓" if fancy else "ok",
        "fail": "✗" if fancy else "FAIL",
        "skip": "-",
    }[outcome]


@click.command("doctor")
@job_name_argument(required=False)
@click.option(
    "-f",
    "--spec",
    "spec_file",
    type=click.Path(dir_okay=False),
    help="Check the room for this (not yet submitted) spec instead of a live job.",
)
@output.output_option(output.DOCUMENT_FORMATS)
@namespace_option
@cluster_options
def doctor_command(
    name: str | None,
    spec_file: str | None,
    fmt: str | None,
    namespace: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
) -> int:
    """Check the cluster (and job NAME) for the usual causes of MWMS failures.

    GPUs on the nodes, quota room for all workers, the headless Service and its endpoints,
    and the TF_CONFIG each live pod actually got. Exit 1 when a check fails.

    \b
    Examples:
      tflaunch doctor mnist -n ml
      tflaunch doctor -f examples/mnist.yaml
      tflaunch doctor mnist -o json | jq '.checks[] | select(.outcome == "fail")'
    """
    if name and spec_file:
        raise click.UsageError("give a job NAME or --spec, not both")
    planned = job_from_options(spec_file, ()) if spec_file else None
    cluster = connect(kubeconfig, kube_context)
    from launcher.cluster import find

    ns = namespace or (planned.namespace if planned else cluster.namespace)
    results: list[checks.Check] = [checks.ok("API server", f"reachable at {cluster.server}")]
    found = find.job_objects(cluster, name, ns) if name else None
    if found is not None and not found.jobs and not found.pods:
        results.append(
            checks.fail(
                "Job",
                f"job {name} not found in namespace {ns}",
                f"check the name and namespace ({program_name()} list -A)",
            )
        )
    jobs = (
        list(found.jobs)
        if found
        else [o for o in render.render(planned) if o["kind"] == "Job"]
        if planned
        else []
    )
    needs = checks.needs_of(jobs)
    results.append(
        _guarded("GPU nodes", lambda: checks.check_gpu_nodes(find.nodes(cluster), needs))
    )
    admitted = bool(found and found.pods)
    results.append(
        _guarded(
            "ResourceQuota",
            lambda: checks.check_quota(find.resource_quotas(cluster, ns), needs, admitted),
        )
    )
    if found is not None and (found.jobs or found.pods):
        assert name is not None
        service = names.service_name(name)
        results.append(checks.check_service(found.services, service))
        results.append(
            _guarded(
                "Service endpoints",
                lambda: checks.check_endpoints(
                    find.endpoint_slices(cluster, service, ns), found.pods, service
                ),
            )
        )
        results.append(checks.check_tf_config(found.pods, needs.workers if needs else None))
    if fmt:
        click.echo(output.dump(output.doctor_document(results, ns, name), fmt))
    for check in [] if fmt else results:
        click.echo(f"{_mark(check.outcome)} {check.name}: {check.detail}")
        if check.fix:
            click.echo(f"    fix: {check.fix}")
    failed = [c for c in results if c.failed]
    if failed:
        click.echo(f"{len(failed)} of {len(results)} checks failed", err=True)
        return ExitStatus.ERROR
    return ExitStatus.SUCCESS


def _guarded(name: str, run: Callable[[], checks.Check]) -> checks.Check:
    """A check whose reads RBAC may forbid: a skip that says so instead of an abort."""
    from launcher.core.errors import Forbidden

    try:
        return run()
    except Forbidden as error:
        return checks.skip(name, f"not checked: {error}")


COMMANDS = (doctor_command,)
