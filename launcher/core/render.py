"""Jinja templates -> Kubernetes objects (plain dicts), checked before anyone sees them.

Pure: no cluster access, no environment reads. `tflaunch render`, `submit` and the operator
all consume `render()`'s output. Structured values (TF_CONFIG, env, resources) enter the
templates through the `json` filter, never as hand-built JSON, and every rendered document is
parsed back and checked for apiVersion/kind/metadata.name.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jinja2
import yaml

from launcher.api.spec import MultiWorkerJob, Toleration
from launcher.core import (
    contract,
    egress,
    exit_policy,
    gang,
    labels,
    limits,
    names,
    pod_env,
    restart,
    script,
    workload,
)
from launcher.core.errors import RenderError, SpecError

TEMPLATES = Path(__file__).parent / "templates"
PORT_NAME = "tf-grpc"
CONTROL_PORT_NAME = "tflaunch-ctl"
"""The wrappers' restart barrier when the group restarts in place (trainer/generations.py)."""

K8sObject = dict[str, Any]

# libyaml's C loader/dumper when PyYAML has it: same output, ~10x faster on large renders.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BASE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _KubectlSafeDumper(_BASE_DUMPER):  # type: ignore[misc,valid-type]
    """Quotes y/Y/n/N too: kubectl's YAML 1.1 parser reads them as booleans (a label `y`
    would fail to decode), while PyYAML writes them bare."""


_KubectlSafeDumper.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN")
)
_YAML_DUMPER = _KubectlSafeDumper


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,  # a missing value is an error, not an empty string
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    # JSON is valid YAML flow syntax: every scalar, list and mapping goes in quoted and escaped.
    env.filters["json"] = _yaml_json
    return env


_SURROGATE_PAIR = re.compile(r"(?<!\\)((?:\\\\)*)\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")
"""A \\uD8xx\\uDCxx escape, not preceded by an odd number of backslashes (a literal one)."""


def _yaml_json(value: Any) -> str:
    """JSON that YAML reads back: a character beyond the BMP, which JSON writes as a UTF-16
    surrogate pair (YAML refuses those), becomes YAML's own `\\UXXXXXXXX` escape."""
    return _SURROGATE_PAIR.sub(_astral_escape, json.dumps(_plain(value)))


def _astral_escape(match: re.Match[str]) -> str:
    high, low = int(match.group(2), 16), int(match.group(3), 16)
    return f"{match.group(1)}\\U{0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00):08x}"


_ENV = _environment()


def _plain(value: Any) -> Any:
    """Tuples (frozen spec fields) -> lists, so json.dumps sees plain data."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def render(
    job: MultiWorkerJob,
    *,
    backoff_limit: int | None = None,
    restarts: int | None = None,
    owner: Mapping[str, Any] | None = None,
    job_annotations: Mapping[str, str] | None = None,
) -> list[K8sObject]:
    """Every object of `job`, in apply order: Service, NetworkPolicy, PodGroup, Job(s).

    The operator, which restarts the group itself, renders the same objects with
    `backoff_limit` (each Job's, instead of spec.backoffLimit), `restarts` (the group's
    restarts so far, in $TFLAUNCH_RESTARTS), `owner` (an ownerReference on every object) and
    `job_annotations` (on each Job).
    """
    context = _job_context(job)
    objects = [_render_one("service.yaml.j2", context)]
    if job.spec.script is not None:
        objects.append(_render_one("configmap.yaml.j2", context))
    if job.spec.network_policy:
        objects.append(_render_one("networkpolicy.yaml.j2", context))
    group = gang.pod_group(job)
    if group is not None:  # before the Jobs: the gang scheduler waits for it to place pods
        objects.append(check_object(group, "gang.pod_group"))
    indices: list[int | None] = (
        [None] if job.spec.layout == "indexed" else list(range(job.spec.workers))
    )
    for index in indices:
        worker = _worker_context(job, index, backoff_limit, restarts)
        objects.append(_render_one("job.yaml.j2", {**context, **worker}))
    extra = dict(job_annotations or {})
    if job.spec.layout == "indexed" and backoff_limit is None and job.spec.workers > 1:
        extra[labels.BACKOFF_LIMIT] = (
            f"{job.spec.backoff_limit * job.spec.workers} pod failures = spec.backoffLimit "
            f"{job.spec.backoff_limit} group restarts x {job.spec.workers} workers (a group "
            "failure fails every worker's pod)"
        )
    if job.spec.success_policy == "chief":
        extra[labels.SUCCESS_POLICY] = "chief"
    if job.spec.checkpoint.run:  # so that a resubmit can keep it (`launcher.core.runs`)
        extra[labels.CHECKPOINT_RUN] = job.spec.checkpoint.run
    for obj in objects:
        if obj["kind"] == "Job" and extra:
            obj["metadata"].setdefault("annotations", {}).update(extra)
        if owner is not None:
            obj["metadata"]["ownerReferences"] = [dict(owner)]
    return objects


def _job_context(job: MultiWorkerJob) -> dict[str, Any]:
    spec = job.spec
    object_labels = {**spec.labels, **labels.job_labels(job.name)}
    return {
        "spec": spec,
        "namespace": job.namespace,
        "workers": spec.workers,
        "port": spec.port,
        "port_name": PORT_NAME,
        "control_port": _control_port(job),
        "container_restart_rules": (
            exit_policy.container_restart_rules() if restart.in_place(spec) else None
        ),
        "control_port_name": CONTROL_PORT_NAME,
        "service_name": names.service_name(job.name),
        "network_policy_name": names.network_policy_name(job.name),
        "object_labels": object_labels,
        "annotations": dict(spec.annotations),
        "pod_annotations": {**spec.annotations, **gang.pod_annotations(job)},
        "job_object_labels": {**object_labels, **gang.job_labels(job)},
        "scheduler_name": gang.scheduler_name(job),
        "suspend": gang.suspend_at_creation(job),
        "worker_selector": labels.worker_selector(job.name),
        "pod_failure_policy": exit_policy.pod_failure_policy(),
        # The Job controller itself ends the indexed Job when worker 0 succeeds (and stops
        # the other pods): SuccessCriteriaMet, then Complete.
        "success_policy": (
            {"rules": [{"succeededIndexes": "0"}]} if spec.success_policy == "chief" else None
        ),
        "run_as_user": contract.TRAINER_UID,
        "image_pull_secrets": [{"name": s} for s in spec.image_pull_secrets],
        "tolerations": [_toleration(t) for t in spec.tolerations],
        "shm": {"medium": "Memory", "sizeLimit": spec.shm_size} if spec.gpus_per_worker else None,
        "shm_path": limits.SHM_MOUNT,
        "peer_ports": _peer_ports(job),
        "egress": egress.rules(job.spec, labels.worker_selector(job.name), _peer_ports(job)),
        "resources": _resources(job),
        **_container_command(job),
        "script_mount": script.MOUNT_PATH,
        "config_map_name": _script_config_map_name(job),
        **_script_layout(job),
    }


def _script_layout(job: MultiWorkerJob) -> dict[str, Any]:
    """The ConfigMap's data and the volume's items (`script.config_map_layout`)."""
    if job.spec.script is None:
        return {"script_data": None, "script_items": None}
    data, items = script.config_map_layout(job.spec.script)
    return {"script_data": data, "script_items": items}


def _script_config_map_name(job: MultiWorkerJob) -> str | None:
    source = job.spec.script
    if source is None:
        return None
    files = script.all_files(source)
    if list(files) == [source.name]:  # one file: the name it always had
        digest = hashlib.sha256(f"{source.name}\0{source.source}".encode()).hexdigest()
    else:
        text = json.dumps([source.name, sorted(files.items())])
        digest = hashlib.sha256(text.encode()).hexdigest()
    return names.script_config_map_name(job.name, digest)


def _container_command(job: MultiWorkerJob) -> dict[str, list[str]]:
    """The container runs the worker wrapper (its command), which runs the program (args)."""
    if job.spec.entrypoint == "image":  # the image's ENTRYPOINT, spec.args its CMD
        return {"container_command": [], "container_args": list(job.spec.args)}
    argv = workload.worker_argv(job, *workload.pod_paths(job))
    wrapper = 3  # python -m trainer.run
    in_place = ["--restart-in-place", str(job.spec.backoff_limit)]
    flags = in_place if restart.in_place(job.spec) else []
    return {"container_command": argv[:wrapper], "container_args": [*flags, *argv[wrapper:]]}


def _control_port(job: MultiWorkerJob) -> int | None:
    """The port the wrappers restart together on (restarting in place), else None."""
    if not restart.in_place(job.spec):
        return None
    return job.spec.port + contract.CONTROL_PORT_OFFSET


def _worker_context(
    job: MultiWorkerJob, index: int | None, backoff_limit: int | None, restarts: int | None
) -> dict[str, Any]:
    """What differs between the indexed Job and each per-worker Job."""
    pod_labels = {
        **job.spec.labels,
        **gang.pod_labels(job),
        **labels.job_labels(job.name),
        labels.NAME: labels.APP_NAME,
        labels.COMPONENT: "worker",
    }
    if index is None:
        job_name = names.indexed_job_name(job.name)
        limit = job.spec.backoff_limit * job.spec.workers  # a group failure fails N pods
    else:
        job_name = names.per_worker_job_name(job.name, index)
        pod_labels[labels.WORKER_INDEX] = str(index)
        limit = job.spec.backoff_limit
    env = [
        *(e.entry() for e in pod_env.tflaunch_env(job, index, restarts)),
        *({"name": k, "value": v} for k, v in job.spec.env.items()),
    ]
    return {
        "worker_index": index,
        "job_name": job_name,
        "hostname": None if index is None else names.worker_hostname(job.name, index),
        "pod_labels": pod_labels,
        "env": env,
        "backoff_limit": limit if backoff_limit is None else backoff_limit,
    }


def _peer_ports(job: MultiWorkerJob) -> list[dict[str, Any]]:
    """What a job's workers may reach on each other: the gRPC port, or with GPUs every TCP
    port (NCCL sets up its collectives on ports of its own choosing)."""
    if job.spec.gpus_per_worker:
        return [{"protocol": "TCP"}]
    control = _control_port(job)
    return [{"protocol": "TCP", "port": p} for p in (job.spec.port, control) if p is not None]


def _toleration(toleration: Toleration) -> dict[str, Any]:
    """A core/v1 Toleration with only the fields that were set."""
    fields = {
        "key": toleration.key,
        "operator": toleration.operator,
        "value": toleration.value,
        "effect": toleration.effect,
        "tolerationSeconds": toleration.toleration_seconds,
    }
    return {k: v for k, v in fields.items() if v not in ("", None)}


def _resources(job: MultiWorkerJob) -> dict[str, dict[str, Any]]:
    spec = job.spec
    requests = {k: v for k, v in vars(spec.resources.requests).items() if v is not None}
    limits: dict[str, Any] = {k: v for k, v in vars(spec.resources.limits).items() if v is not None}
    if spec.gpus_per_worker > 0:  # extended resources go in limits; requests default to them
        limits["nvidia.com/gpu"] = str(spec.gpus_per_worker)  # a quantity, as the server stores it
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def render_template(template: str, context: dict[str, Any]) -> K8sObject:
    """One template of templates/ with its context, checked (e.g. the TensorBoard pod)."""
    return _render_one(template, context)


def _render_one(template: str, context: dict[str, Any]) -> K8sObject:
    try:
        text = _ENV.get_template(template).render(**context)
    except jinja2.TemplateError as error:
        raise RenderError(f"template {template}: {error}") from error
    return check_object(yaml.load(text, Loader=_YAML_LOADER), template)


def check_object(document: Any, origin: str) -> K8sObject:
    """Reject anything that is not a Kubernetes object (the lightkube codec's rule)."""
    if not isinstance(document, dict):
        raise RenderError(f"{origin}: rendered to {type(document).__name__}, not an object")
    for key in ("apiVersion", "kind"):
        if not document.get(key):
            raise RenderError(f"{origin}: rendered object has no {key}")
    if not (document.get("metadata") or {}).get("name"):
        raise RenderError(f"{origin}: rendered {document['kind']} has no metadata.name")
    return document


def to_yaml(objects: Iterable[K8sObject]) -> str:
    return yaml.dump_all(
        list(objects), Dumper=_YAML_DUMPER, sort_keys=False, default_flow_style=False
    )


def to_json(objects: Iterable[K8sObject]) -> str:
    """A v1 List, which `kubectl apply -f -` accepts like a YAML stream."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}, indent=2) + "\n"


def file_name(obj: K8sObject) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def write_out_dir(objects: list[K8sObject], out_dir: Path) -> list[Path]:
    """One YAML file per object. Called only after every object rendered cleanly.

    Raises:
        SpecError: the directory cannot be made or written (read-only, full, /proc).
    """
    written = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for obj in objects:
            path = out_dir / file_name(obj)
            path.write_text(to_yaml([obj]))
            written.append(path)
    except OSError as error:
        raise SpecError(
            "--out-dir",
            f"cannot write {error.filename or out_dir}: {error.strerror or error}; choose a "
            "writable directory",
        ) from None
    return written
