"""Limits the API server or the kernel enforce, checked before anything renders.

Each rule here stands for a refusal that would otherwise come late and confusing: the API
server's (int32 fields, a request above its limit, reserved keys, two mounts at one path,
env names the launcher sets), the kernel's (one environment string over 128 KiB: "Argument
list too long" when the container starts) or the worker's own (a non-root process cannot
bind a port below 1024). `load.validate` calls `check(job)`; each failure is a SpecError
naming the field and the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.api import rules
from launcher.core import contract, names, pod_env
from launcher.core import script as script_file
from launcher.core.errors import SpecError
from launcher.core.mistakes import Mistakes
from launcher.core.quantities import quantity

if TYPE_CHECKING:
    from launcher.api.spec import JobSpec, MultiWorkerJob, Toleration

INT32_MAX = rules.INT32_MAX
MAX_ARG_STRLEN = 128 * 1024
"""The kernel's limit on one argv or environment string ("NAME=value" and its NUL byte)."""
MAX_PER_WORKER = rules.MAX_PER_WORKER
MIN_PORT = rules.MIN_PORT
TMP_MOUNT = "/tmp"
"""Every worker mounts an emptyDir here (HOME; the root filesystem is read-only)."""
SHM_MOUNT = "/dev/shm"
"""GPU workers mount a memory-backed emptyDir here (the runtime's default is 64 MiB)."""
SCRIPT_MOUNT = script_file.MOUNT_PATH
EXEC_BUDGET = 2 * 1024 * 1024 - 256 * 1024
"""Bytes of spec.env, spec.command and the program's arguments together: the kernel refuses
to start a program whose argv and environment exceed ARG_MAX (2 MiB with the usual 8 MiB
stack), and tflaunch's own environment (TF_CONFIG up to 128 KiB) and the image's need room."""
ANNOTATIONS_BUDGET = 256 * 1024 - 8 * 1024
"""Bytes of spec.annotations (keys and values): the API server refuses more than 256 KiB of
annotations on one object, and tflaunch adds its own."""

ENV_PREFIX = "TFLAUNCH_"
ENV_ALLOWED = frozenset({contract.ENV_LOG_LEVEL, contract.ENV_STANDBY_IMPORTS})
"""TFLAUNCH_* names a user may set: TFLAUNCH_LOG_LEVEL=debug shows TensorFlow's own logs,
TFLAUNCH_STANDBY_IMPORTS="" turns restart-in-place standbys off."""

RESERVED_KEY_DOMAINS = ("kubernetes.io", "k8s.io")
"""Label and annotation prefixes Kubernetes keeps for itself (and their subdomains)."""


def gather(job: MultiWorkerJob, found: Mistakes) -> None:
    """Run every limit rule but `check_int32` (which `validation` runs first), each on its
    own, keeping each mistake in `found`."""
    spec = job.spec
    found.check(check_port, spec.port)
    found.check(check_env_names, spec.env, pod_env.reserved(job))
    found.check(check_requests_within_limits, spec)
    for field_key, mapping in (("labels", spec.labels), ("annotations", spec.annotations)):
        found.check(check_reserved_keys, f"spec.{field_key}", mapping)
    found.check(check_mount_path, spec.checkpoint.mount_path)
    found.check(check_shm_size, spec)
    for i, toleration in enumerate(spec.tolerations):
        found.check(check_toleration, f"spec.tolerations[{i}]", toleration)
    found.check(check_layout_size, job)
    found.check(check_tf_config_size, job)
    found.check(check_exec_strings, spec)
    found.check(check_annotations_size, spec.annotations)
    found.check(check_image_pull_secrets, spec.image_pull_secrets)
    if spec.script is not None:
        found.check(check_mount_path, spec.checkpoint.mount_path, True)


def check_port(port: int) -> None:
    if not MIN_PORT <= port <= 65535:
        raise SpecError(rules.PORT_RANGE.field, f"{rules.PORT_RANGE.message}; got {port}")


def check_env_names(env: dict[str, str], reserved: dict[str, str]) -> None:
    """`reserved`: what tflaunch sets, and why (`pod_env.reserved`, derived from render)."""
    for name in env:
        where = f"spec.env.{name}"
        if name in reserved:
            raise SpecError(where, f"is {reserved[name]}; remove it")
        if name.startswith(ENV_PREFIX) and name not in ENV_ALLOWED:
            allowed = ", ".join(sorted(ENV_ALLOWED))
            raise SpecError(
                where,
                f"the {ENV_PREFIX} prefix is reserved for tflaunch (only {allowed} may be set)",
            )


def check_int32(job: MultiWorkerJob) -> None:
    """Fields the API server stores as int32."""
    spec = job.spec
    multiplier = spec.workers if spec.layout == "indexed" else 1
    if spec.backoff_limit * multiplier > INT32_MAX:
        raise SpecError(
            "spec.backoffLimit",
            f"{spec.backoff_limit} x {multiplier} workers is the Job's backoffLimit, above "
            f"{INT32_MAX}; use at most {INT32_MAX // multiplier}",
        )
    for where, value in (
        ("spec.ttlSecondsAfterFinished", spec.ttl_seconds_after_finished),
        ("spec.activeDeadlineSeconds", spec.active_deadline_seconds),
        ("spec.gpusPerWorker", spec.gpus_per_worker),
    ):
        if value is not None and value > INT32_MAX:
            raise SpecError(where, f"{value} is above {INT32_MAX}, the largest the API accepts")


def check_requests_within_limits(spec: JobSpec) -> None:
    requests, limits = spec.resources.requests, spec.resources.limits
    for unit in ("cpu", "memory"):
        request, limit = getattr(requests, unit), getattr(limits, unit)
        if request is not None and limit is not None and quantity(request) > quantity(limit):
            raise SpecError(
                f"spec.resources.requests.{unit}",
                f"{request} is above its limit {limit} (spec.resources.limits.{unit}); "
                "raise the limit or lower the request",
            )


RECOMMENDED_KEYS = frozenset(
    f"app.kubernetes.io/{name}"
    for name in ("name", "instance", "version", "component", "part-of", "managed-by")
)
"""Kubernetes' recommended labels: under its prefix, but meant for everyone to set (those
tflaunch sets itself are refused in spec.labels as such, `labels.RESERVED`)."""


def check_reserved_keys(where: str, mapping: dict[str, str]) -> None:
    for key in mapping:
        if key in RECOMMENDED_KEYS:
            continue
        prefix = key.rpartition("/")[0].lower()
        if any(prefix == d or prefix.endswith("." + d) for d in RESERVED_KEY_DOMAINS):
            raise SpecError(
                f"{where}.{key}",
                f"the prefix {prefix}/ is reserved for Kubernetes; use your own domain "
                "(e.g. example.com/...)",
            )


def check_mount_path(path: str, script: bool = False) -> None:
    taken_paths = [(TMP_MOUNT, "its scratch volume"), (SHM_MOUNT, "its shared memory")]
    if script:
        taken_paths.append((SCRIPT_MOUNT, "spec.script"))
    for taken, what in taken_paths:
        if path.rstrip("/") == taken:
            raise SpecError(
                "spec.checkpoint.mountPath",
                f"{path} is where every worker mounts {what}; choose another path "
                "(the default is /checkpoints)",
            )


def check_shm_size(spec: JobSpec) -> None:
    """/dev/shm is memory: it must fit under the memory limit (GPU workers only mount it)."""
    limit = spec.resources.limits.memory
    if spec.gpus_per_worker and limit is not None and quantity(spec.shm_size) > quantity(limit):
        raise SpecError(
            "spec.shmSize",
            f"{spec.shm_size} of /dev/shm counts against the memory limit {limit} "
            "(spec.resources.limits.memory); lower it or raise the limit",
        )


def check_toleration(where: str, toleration: Toleration) -> None:
    """The API server's rules for one toleration."""
    if toleration.operator == "Exists" and toleration.value:
        raise SpecError(f"{where}.value", "must be empty when operator is Exists")
    if not toleration.key and toleration.operator != "Exists":
        raise SpecError(f"{where}.operator", "must be Exists when key is empty (all taints)")
    if toleration.toleration_seconds is not None and toleration.effect != "NoExecute":
        raise SpecError(f"{where}.tolerationSeconds", "is only allowed with effect NoExecute")


def check_layout_size(job: MultiWorkerJob) -> None:
    if job.spec.layout == "per-worker" and job.spec.workers > MAX_PER_WORKER:
        raise SpecError(
            rules.PER_WORKER_SIZE.field,
            f"{job.spec.workers} {rules.PER_WORKER_SIZE.message}",
        )


def tf_config_env_bytes(job: MultiWorkerJob, workers: int) -> int:
    """Bytes of the largest "TF_CONFIG=..." environment string (with its NUL) for `workers`."""
    address = names.worker_fqdn(job.name, 0, job.namespace, job.spec.cluster_domain)
    quoted = len(address) - 1 + len(f':{job.spec.port}""')  # without its index's digits
    digits = sum(len(str(i)) for i in range(workers))
    skeleton = '{"cluster":{"worker":[]},"task":{"type":"worker","index":}}'
    shape = job.spec.tf_config
    commas = largest_index = workers - 1
    if shape.chief and workers > 1:  # member 0 in a list of its own; the last is worker N-2
        skeleton = skeleton.replace('{"worker"', f'{{"{shape.chief}":[],"worker"')
        commas = largest_index = workers - 2
    if shape.environment:
        skeleton = skeleton[:-1] + f',"environment":"{shape.environment}"}}'
    return (
        len(f"{contract.ENV_TF_CONFIG}=")
        + len(skeleton)
        + quoted * workers
        + digits
        + commas
        + len(str(largest_index))
        + 1
    )


def largest_fitting_workers(job: MultiWorkerJob) -> int:
    """The largest worker count whose TF_CONFIG fits in one environment string."""
    low, high = 0, job.spec.workers
    while low < high:
        middle = (low + high + 1) // 2
        if tf_config_env_bytes(job, middle) <= MAX_ARG_STRLEN:
            low = middle
        else:
            high = middle - 1
    return low


def check_tf_config_size(job: MultiWorkerJob) -> None:
    size = tf_config_env_bytes(job, job.spec.workers)
    if size > MAX_ARG_STRLEN:
        raise SpecError(
            "spec.workers",
            f"TF_CONFIG for {job.spec.workers} workers would be {size} bytes, over the "
            f"kernel's {MAX_ARG_STRLEN}-byte limit on one environment variable (the "
            f"container would not start); with this name and namespace use at most "
            f"{largest_fitting_workers(job)} workers, or shorter names",
        )


def _exec_strings(spec: JobSpec) -> list[tuple[str, str]]:
    """(field, string) of everything that becomes one argv or environment string."""
    strings = [(f"spec.env.{name}", f"{name}={value}") for name, value in spec.env.items()]
    strings += [(f"spec.command[{i}]", word) for i, word in enumerate(spec.command)]
    strings += [(f"spec.args[{i}]", word) for i, word in enumerate(spec.args)]
    strings += [
        (f"spec.trainer.extraArgs[{i}]", word) for i, word in enumerate(spec.trainer.extra_args)
    ]
    return strings


def check_exec_strings(spec: JobSpec) -> None:
    """What the kernel refuses at exec: a NUL byte (it ends the C string), one string over
    MAX_ARG_STRLEN, all of them over the budget ("Argument list too long")."""
    total = 0
    for where, text in _exec_strings(spec):
        if "\0" in text:
            raise SpecError(where, "contains a NUL byte, which no argument or environment "
                            "variable can hold; remove it")  # fmt: skip
        size = len(text.encode("utf-8")) + 1
        if size > MAX_ARG_STRLEN:
            raise SpecError(
                where,
                f"is {size} bytes, over the kernel's {MAX_ARG_STRLEN}-byte limit on one "
                "argument or environment string (the container would not start); pass large "
                "data in a file (spec.script, an image, the checkpoint volume)",
            )
        total += size
    if total > EXEC_BUDGET:
        raise SpecError(
            "spec.env",
            f"spec.env, spec.command and the program's arguments come to {total} bytes, over "
            f"the {EXEC_BUDGET} the kernel leaves them (ARG_MAX, with room for TF_CONFIG); "
            "pass large data in a file",
        )


def check_annotations_size(annotations: dict[str, str]) -> None:
    total = sum(len(k.encode("utf-8")) + len(v.encode("utf-8")) for k, v in annotations.items())
    if total > ANNOTATIONS_BUDGET:
        raise SpecError(
            "spec.annotations",
            f"come to {total} bytes, over the {ANNOTATIONS_BUDGET} allowed (the API server "
            "refuses more than 256 KiB of annotations on an object, and tflaunch adds its "
            "own); keep large data out of annotations",
        )


def check_image_pull_secrets(secrets: tuple[str, ...]) -> None:
    seen: set[str] = set()
    for i, secret in enumerate(secrets):
        if secret in seen:
            raise SpecError(f"spec.imagePullSecrets[{i}]", f"{secret!r} is listed twice")
        seen.add(secret)
