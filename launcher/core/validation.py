"""The format and cross-field rules of a MultiWorkerJob, checked after typing.

`launcher.core.typed` checks each value's type and bounds as the document is built into the
dataclasses; `load.validate` checks the header and then calls `check()` here for the rest:
names, quantities, label keys, the trainer's arguments, the gang rules (each one also a CEL
rule of the CRD, `launcher.api.rules`) and the limits of the API server
(`launcher.core.limits`). Kept apart so that spec.py stays the model.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import TYPE_CHECKING, Any

from launcher.api import rules
from launcher.core import contract, labels, limits, program, restart, schemas
from launcher.core.errors import SpecError, SpecErrors
from launcher.core.mistakes import Mistakes
from launcher.core.names import worker_hostname

if TYPE_CHECKING:  # spec imports this module
    from launcher.api.spec import JobSpec, MultiWorkerJob, Resources

DNS_1123_SUBDOMAIN = rules.DNS_1123_SUBDOMAIN
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1123_SUBDOMAIN = re.compile(DNS_1123_SUBDOMAIN)
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|[KMGTPE]i|[mkMGTPE])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")


def check_gpu_image(spec: JobSpec) -> None:
    """A GPU job's image must be a GPU build: a pod gets its GPUs, and TensorFlow in a CPU
    build cannot use them, so the job would train on CPU without a word (`load.validate`
    checks it, except for a local run, which uses no image)."""
    if spec.gpus_per_worker > 0 and (gpu_image := gpu_variant(spec.image)):
        raise SpecError(
            "spec.image",
            f"{spec.image} is a CPU image (its tag ends in -cpu) but spec.gpusPerWorker is "
            f"{spec.gpus_per_worker}: TensorFlow in it cannot use the GPUs; use the GPU "
            f"build {gpu_image} (`make image`, `--image {gpu_image}`) or --gpus 0",
        )


def gpu_variant(image: str) -> str | None:
    """The GPU build's name of a CPU image, by the project's naming (`make image VARIANT=cpu`
    tags `0.1.0-cpu`, the GPU build `0.1.0`); None for any other image."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag or "@" in image or not tag.endswith("-cpu"):
        return None
    return f"{name}:{tag.removesuffix('-cpu')}"


def longest_generated_name(name: str, workers: int) -> str:
    """The longest object/host name a job produces: the last worker's pod hostname."""
    return worker_hostname(name, max(0, workers - 1))


def check(job: MultiWorkerJob) -> None:
    """Check every cross-field and format rule below the document's type; raise every
    SpecError found, all at once."""
    found = Mistakes()
    gather(job, found)
    found.raise_any()


def gather(job: MultiWorkerJob, found: Mistakes) -> None:
    """Run every rule of `check()` on its own, keeping each mistake in `found`."""
    spec = job.spec
    found.check(_validate_metadata, job)
    found.check(_validate_image, spec.image)
    found.check(limits.check_int32, job)
    found.check(_validate_cluster_domain, spec.cluster_domain)
    if program.own_program(spec):
        found.check(program.validate, spec)
    else:
        found.check(program.check_builtin_only, spec)
        for trainer_rule in (_validate_batch, _validate_save_freq, _validate_learning_rate):
            found.check(trainer_rule, job)
    found.check(_validate_resources, spec.resources, spec.shm_size)
    for name in spec.env:
        found.check(_validate_env_name, name)
    for key in ("labels", "annotations", "node_selector"):
        for label_key in getattr(spec, key):
            found.check(_validate_label_key, f"spec.{_key_of(spec, key)}", label_key)
    for key in spec.labels:
        found.check(_validate_unreserved_label, key)
    for key, value in spec.labels.items():
        found.check(_validate_label_value, f"spec.labels.{key}", value)
    for key, value in spec.node_selector.items():
        found.check(_validate_label_value, f"spec.nodeSelector.{key}", value)
    for i, toleration in enumerate(spec.tolerations):
        if toleration.key:
            found.check(_validate_label_key, f"spec.tolerations[{i}].key", toleration.key)
        found.check(_validate_label_value, f"spec.tolerations[{i}].value", toleration.value)
    names = ("priority_class_name", "service_account_name", "scheduler_name", "queue_name")
    for field_key in names:
        found.check(_validate_object_name, spec, field_key)
    for i, secret in enumerate(spec.image_pull_secrets):
        found.check(_validate_secret_name, i, secret)
    found.check(_validate_checkpoint, spec)
    found.check(_validate_chief, spec)
    limits.gather(job, found)
    if spec.deny_metadata_egress and not spec.network_policy:
        found.add(SpecError(rules.METADATA_EGRESS.field, rules.METADATA_EGRESS.message))
    found.check(_validate_egress, spec)
    found.check(_validate_gang, spec)
    # As written: unset, port 65535 restarts by recreation (launcher.core.restart).
    if spec.restart == "inPlace" and spec.port + contract.CONTROL_PORT_OFFSET > restart.MAX_PORT:
        found.add(SpecError(rules.RESTART_PORT.field, rules.RESTART_PORT.message))
    if spec.affinity:
        found.check(schemas.check_affinity, spec.affinity)


def _validate_image(image: str) -> None:
    if not image.strip():
        raise SpecError(
            "spec.image", "is required: the trainer image (see docker/ and `make image`)"
        )
    if not _IMAGE.fullmatch(image):
        raise SpecError("spec.image", f"{image!r} is not an image reference")


def _validate_cluster_domain(domain: str) -> None:
    if len(domain) > 253 or not _DNS_1123_SUBDOMAIN.fullmatch(domain):
        raise SpecError("spec.clusterDomain", f"{domain!r} is not a DNS domain")


def _validate_env_name(name: str) -> None:
    if not _ENV_NAME.fullmatch(name):
        raise SpecError(f"spec.env.{name}", "is not a valid environment variable name")


def _validate_unreserved_label(key: str) -> None:
    if key in labels.RESERVED:
        raise SpecError(f"spec.labels.{key}", "is set by tflaunch; choose another key")


def _validate_object_name(spec: JobSpec, field_key: str) -> None:
    value = getattr(spec, field_key)
    if value is not None and not _DNS_1123_SUBDOMAIN.fullmatch(value):
        raise SpecError(f"spec.{_key_of(spec, field_key)}", f"{value!r} is not a valid name")


def _validate_secret_name(i: int, secret: str) -> None:
    if not _DNS_1123_SUBDOMAIN.fullmatch(secret):
        raise SpecError(f"spec.imagePullSecrets[{i}]", f"{secret!r} is not a valid Secret name")


def _validate_checkpoint(spec: JobSpec) -> None:
    claim = spec.checkpoint.claim_name
    if claim is not None and not _DNS_1123_SUBDOMAIN.fullmatch(claim):
        raise SpecError("spec.checkpoint.claimName", "is not a valid PersistentVolumeClaim name")
    if not spec.checkpoint.mount_path.startswith("/"):
        raise SpecError("spec.checkpoint.mountPath", "must be an absolute path")
    run = spec.checkpoint.run
    if run is not None and (len(run) > 63 or not _DNS_1123_LABEL.fullmatch(run)):
        raise SpecError(
            "spec.checkpoint.run",
            f"{run!r} is not a run id (lower-case letters, digits and '-', at most 63), e.g. "
            "20261130-174512-3f2a",
        )


def _validate_chief(spec: JobSpec) -> None:
    if spec.tf_config.chief and spec.layout != "per-worker":
        raise SpecError(rules.CHIEF_PER_WORKER.field, rules.CHIEF_PER_WORKER.message)
    if spec.tf_config.chief and not program.own_program(spec):
        raise SpecError(
            "spec.tfConfig.chief",
            "is for your own program (spec.command or spec.script, as a TFJob's): the "
            "built-in trainer runs every member as a worker; remove it",
        )


def _validate_metadata(job: MultiWorkerJob) -> None:
    name, namespace = job.metadata.name, job.metadata.namespace
    if not _DNS_1035.fullmatch(name):
        raise SpecError("metadata.name", f"{rules.NAME_FORMAT.message}; got {name!r}")
    longest = longest_generated_name(name, job.spec.workers)
    if len(longest) > rules.MAX_NAME_LENGTH:
        room = rules.MAX_NAME_LENGTH - (len(longest) - len(name))
        raise SpecError(
            "metadata.name",
            f"{rules.NAME_LENGTH.message} (here {longest!r} has {len(longest)}; use at most "
            f"{max(room, 1)} characters)",
        )
    check_namespace(namespace, "metadata.namespace")


def check_namespace(namespace: str, where: str) -> None:
    """A namespace name (DNS-1123 label), from a spec or a flag."""
    if len(namespace) > 63 or not _DNS_1123_LABEL.fullmatch(namespace):
        raise SpecError(where, f"{namespace!r} is not a valid namespace name")


def _validate_batch(job: MultiWorkerJob) -> None:
    trainer, replicas = job.spec.trainer, job.replicas
    if trainer.global_batch_size % replicas:
        lower = max(replicas, trainer.global_batch_size // replicas * replicas)
        raise SpecError(
            rules.BATCH_DIVISIBLE.field,
            f"{rules.BATCH_DIVISIBLE.message} (here {trainer.global_batch_size} across "
            f"{replicas} replicas: use a multiple of {replicas}, e.g. {lower} or "
            f"{lower + replicas})",
        )


def _validate_save_freq(job: MultiWorkerJob) -> None:
    save_freq = job.spec.trainer.save_freq
    if isinstance(save_freq, str) and save_freq != "epoch":
        raise SpecError(
            "spec.trainer.saveFreq", f'must be "epoch" or a number of steps, got {save_freq!r}'
        )
    if isinstance(save_freq, int):
        _at_least("spec.trainer.saveFreq", save_freq, 1)
        if save_freq > limits.INT32_MAX:
            raise SpecError(
                "spec.trainer.saveFreq", f"must be at most {limits.INT32_MAX}, got {save_freq}"
            )


def _validate_learning_rate(job: MultiWorkerJob) -> None:
    if not job.spec.trainer.learning_rate > 0:
        raise SpecError("spec.trainer.learningRate", "must be greater than 0")


def _validate_egress(spec: JobSpec) -> None:
    if spec.egress == "peers" and not spec.network_policy:
        raise SpecError(rules.EGRESS_POLICY.field, rules.EGRESS_POLICY.message)
    if spec.egress_to and spec.egress != "peers":
        raise SpecError(rules.EGRESS_TO.field, rules.EGRESS_TO.message)
    for i, target in enumerate(spec.egress_to):
        try:
            ipaddress.ip_network(target.cidr)
        except ValueError:
            raise SpecError(
                f"spec.egressTo[{i}].cidr",
                f"must be a network such as 10.20.0.0/16 or 203.0.113.7/32 (its host bits "
                f"zero), not {target.cidr!r}",
            ) from None


def _validate_gang(spec: JobSpec) -> None:
    """The gang rules of `launcher.api.rules`, in Python."""
    broken = (
        (rules.KUEUE_INDEXED, spec.gang == "kueue" and spec.layout != "indexed"),
        (rules.KUEUE_QUEUE, spec.gang == "kueue" and spec.queue_name is None),
        (
            rules.QUEUE_NEEDS_GANG,
            spec.queue_name is not None and spec.gang not in ("kueue", "volcano"),
        ),
        (
            rules.VOLCANO_SCHEDULER,
            spec.gang == "volcano" and spec.scheduler_name not in (None, "volcano"),
        ),
    )
    errors = [SpecError(rule.field, rule.message) for rule, violated in broken if violated]
    if errors:
        raise SpecErrors.of(errors)


def _validate_resources(resources_: Resources, shm_size: str) -> None:
    if not _QUANTITY.fullmatch(shm_size):
        raise SpecError("spec.shmSize", f"{shm_size!r} is not a Kubernetes quantity (e.g. 1Gi)")
    for kind in ("requests", "limits"):
        for unit in ("cpu", "memory"):
            value = getattr(getattr(resources_, kind), unit)
            if value is not None and not _QUANTITY.fullmatch(value):
                raise SpecError(
                    f"spec.resources.{kind}.{unit}",
                    f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2, 4Gi)",
                )


def _validate_label_key(where: str, key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if (
        not name
        or len(name) > 63
        or not _LABEL_NAME.fullmatch(name)
        or (prefix and (len(prefix) > 253 or not _DNS_1123_SUBDOMAIN.fullmatch(prefix)))
    ):
        raise SpecError(f"{where}.{key}", "is not a valid key (e.g. example.com/team)")


def _validate_label_value(where: str, value: str) -> None:
    if len(value) > 63 or not _LABEL_NAME.fullmatch(value):
        raise SpecError(where, f"{value!r} is not a valid label value")


def _at_least(where: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise SpecError(where, f"must be at least {minimum}, got {value}")


def _key_of(model: Any, attribute: str) -> str:
    """The file key (camelCase) of a field of a spec dataclass (or of one of its instances)."""
    for f in dataclasses.fields(model):
        if f.name == attribute:
            return str(f.metadata["key"])
    raise KeyError(attribute)
