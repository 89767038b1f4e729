"""Kubeflow TFJob manifests (kubeflow.org/v1), read into a MultiWorkerJob document.

The one place that knows the TFJob shape: `load_job` hands a TFJob here and gets back the
plain data of the equivalent MultiWorkerJob, which then goes through the ordinary typing and
validation. Every TFJob field is either carried onto a MultiWorkerJob field or refused by
name (a SpecError, exit 2) with what to do instead; nothing is dropped silently. The field
by field table is docs/migrating-from-tfjob.md.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from launcher.api.identity import API_VERSION, KIND
from launcher.core.errors import SpecError

TFJOB_API_VERSION = "kubeflow.org/v1"
TFJOB_KIND = "TFJob"
CONTAINER = "tensorflow"
"""training-operator finds its container by this name (kubeflowv1.TFJobDefaultContainerName)."""
PORT_NAME = "tfjob-port"
DEFAULT_PORT = 2222
GPU = "nvidia.com/gpu"

_REFUSED_REPLICAS = {
    "PS": "parameter servers are ParameterServerStrategy, which tflaunch does not run (it runs "
    "MultiWorkerMirroredStrategy): use MultiWorkerMirroredStrategy with Worker replicas only",
    "Evaluator": "a side-car evaluator is not run beside the group (tflaunch's status, "
    "restarts and exit codes are the all-reduce group's): evaluate in the program (fit's "
    "validation_data, or model.evaluate after fit), or run tf.keras.utils.SidecarEvaluator as "
    "a Job of its own on spec.checkpoint's volume; remove the Evaluator replica",
}
MANAGED_BY = "tflaunch.dev/operator"
"""runPolicy.managedBy of a TFJob the tflaunch operator serves (`tflaunch operator --tfjobs`);
a TFJob naming another controller is left to it."""
CHIEFS = ("Chief", "Master")
"""training-operator's names for the one replica that decides the job (Master: the old one)."""
_RESTART_POLICIES = ("Never", "OnFailure", "Always", "ExitCode")
_POD_FIELDS = {
    # pod template field -> MultiWorkerJob spec field
    "nodeSelector": "nodeSelector",
    "tolerations": "tolerations",
    "affinity": "affinity",
    "priorityClassName": "priorityClassName",
    "serviceAccountName": "serviceAccountName",
    "schedulerName": "schedulerName",
    "terminationGracePeriodSeconds": "terminationGracePeriodSeconds",
}
_RUN_POLICY_FIELDS = {
    "ttlSecondsAfterFinished": "ttlSecondsAfterFinished",
    "activeDeadlineSeconds": "activeDeadlineSeconds",
    "backoffLimit": "backoffLimit",
    "suspend": "suspend",
}


def managed_by(tfjob: Mapping[str, Any]) -> str | None:
    """The TFJob's runPolicy.managedBy (None or "" when it names no controller)."""
    run_policy = (tfjob.get("spec") or {}).get("runPolicy") or {}
    value = run_policy.get("managedBy") if isinstance(run_policy, Mapping) else None
    return str(value) if value else None


def controller_of(obj: Mapping[str, Any]) -> str | None:
    """The name of the TFJob that controls `obj` (the MultiWorkerJob the operator made of
    it, `tflaunch operator --tfjobs`), or None."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("kind") == TFJOB_KIND and ref.get("controller"):
            return str(ref.get("name"))
    return None


def is_tfjob(document: Mapping[str, Any]) -> bool:
    """Whether a parsed document is a Kubeflow TFJob (by apiVersion and kind)."""
    return document.get("kind") == TFJOB_KIND and str(document.get("apiVersion", "")).startswith(
        "kubeflow.org/"
    )


def to_multiworkerjob(tfjob: Mapping[str, Any]) -> dict[str, Any]:
    """The plain data of the MultiWorkerJob that runs `tfjob`; raises SpecError naming the
    first TFJob field tflaunch cannot carry."""
    if tfjob.get("apiVersion") != TFJOB_API_VERSION:
        raise SpecError("apiVersion", f"a TFJob must be {TFJOB_API_VERSION}")
    _only(tfjob, "", {"apiVersion", "kind", "metadata", "spec", "status"})
    metadata = _mapping(tfjob, "metadata", "")
    _only(metadata, "metadata", {"name", "namespace", "labels", "annotations"})
    if "name" not in metadata:
        raise SpecError("metadata.name", "required: the job's name")
    spec = _mapping(tfjob, "spec", "")
    _only(spec, "spec", {"tfReplicaSpecs", "runPolicy", "successPolicy", "enableDynamicWorker"})
    if spec.get("enableDynamicWorker"):
        raise SpecError(
            "spec.enableDynamicWorker",
            "a sparse cluster spec is for ParameterServerStrategy: remove it",
        )
    out: dict[str, Any] = {
        "labels": dict(_mapping(metadata, "labels", "metadata")),
        "annotations": dict(_mapping(metadata, "annotations", "metadata")),
    }
    out["successPolicy"] = _success_policy(spec.get("successPolicy"))
    _group(_replicas(spec), out)
    _run_policy(_mapping(spec, "runPolicy", "spec"), out)
    job_metadata = {"name": metadata["name"]}
    if "namespace" in metadata:
        job_metadata["namespace"] = metadata["namespace"]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": job_metadata,
        "spec": {k: v for k, v in out.items() if v not in ({}, [])},
    }


_REPLICA_TYPES = {t.lower(): t for t in ("Chief", "Master", "Worker", "Evaluator", "PS")}
"""training-operator takes a replica type in any case (`chief`, `WORKER`) as this name."""


def _replicas(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    written = _mapping(spec, "tfReplicaSpecs", "spec")
    replicas = {_REPLICA_TYPES.get(str(k).lower(), k): v for k, v in written.items()}
    for rtype in replicas:
        where = f"spec.tfReplicaSpecs.{rtype}"
        if rtype in _REFUSED_REPLICAS:
            raise SpecError(where, _REFUSED_REPLICAS[rtype])
        if rtype not in ("Worker", *CHIEFS):
            raise SpecError(
                where,
                "unknown replica type: a TFJob has Chief, Master, Worker, "
                "Evaluator or PS (tflaunch runs Chief or Master, and Worker)",
            )
    if all(c in replicas for c in CHIEFS):
        raise SpecError(
            "spec.tfReplicaSpecs.Master", "a TFJob has one Chief or one Master: keep one"
        )
    if "Worker" not in replicas and not any(c in replicas for c in CHIEFS):
        raise SpecError(
            "spec.tfReplicaSpecs.Worker", "required: the MultiWorkerMirroredStrategy workers"
        )
    return replicas


def _group(replicas: Mapping[str, Any], out: dict[str, Any]) -> None:
    """The group: a chief (Chief or Master) as worker 0, then the Workers, from one pod
    template; TF_CONFIG names their tasks as training-operator does (`spec.tfConfig`)."""
    chief = next((c for c in CHIEFS if c in replicas), None)
    shape: dict[str, str] = {"environment": "cloud"}
    if chief is None:
        _replica("Worker", _mapping(replicas, "Worker", "spec.tfReplicaSpecs"), out)
        out["tfConfig"] = shape
        return
    chief_spec = _mapping(replicas, chief, "spec.tfReplicaSpecs")
    if chief_spec.get("replicas", 1) != 1:
        raise SpecError(
            f"spec.tfReplicaSpecs.{chief}.replicas",
            "must be 1: TensorFlow allows one chief (add the others to Worker)",
        )
    _replica(chief, chief_spec, out)
    if "Worker" in replicas:
        workers = copy.deepcopy(out)
        _replica("Worker", _mapping(replicas, "Worker", "spec.tfReplicaSpecs"), workers)
        for key in sorted(set(out) | set(workers)):
            if key != "workers" and out.get(key) != workers.get(key):
                raise SpecError(
                    f"spec.tfReplicaSpecs.{chief}",
                    f"differs from Worker in {key.lstrip('_')}: tflaunch runs the whole "
                    f"group from one pod template; give the {chief} the Worker's (and branch "
                    "on task.type in the program)",
                )
        out["workers"] = 1 + workers["workers"]
    out["layout"] = "per-worker"  # each Job its own TF_CONFIG: the chief's task differs
    out["tfConfig"] = {"chief": chief.lower(), **shape}


def _replica(rtype: str, replica: Mapping[str, Any], out: dict[str, Any]) -> None:
    where = f"spec.tfReplicaSpecs.{rtype}"
    _only(replica, where, {"replicas", "restartPolicy", "template"})
    out["workers"] = replica.get("replicas", 1)
    policy = replica.get("restartPolicy", "Never")
    if policy not in _RESTART_POLICIES:
        raise SpecError(f"{where}.restartPolicy", f"must be one of {', '.join(_RESTART_POLICIES)}")
    out["_restartPolicy"] = policy
    template = _mapping(replica, "template", where)
    _only(template, f"{where}.template", {"metadata", "spec"})
    pod_meta = _mapping(template, "metadata", f"{where}.template")
    _only(pod_meta, f"{where}.template.metadata", {"labels", "annotations"})
    out["labels"] = {**out["labels"], **_mapping(pod_meta, "labels", f"{where}.template.metadata")}
    out["annotations"] = {
        **out["annotations"],
        **_mapping(pod_meta, "annotations", f"{where}.template.metadata"),
    }
    pod = _mapping(template, "spec", f"{where}.template")
    pod_where = f"{where}.template.spec"
    _only(
        pod, pod_where, {"containers", "volumes", "restartPolicy", "imagePullSecrets", *_POD_FIELDS}
    )
    for key, field in _POD_FIELDS.items():
        if key in pod:
            out[field] = pod[key]
    secrets = pod.get("imagePullSecrets") or []
    out["imagePullSecrets"] = [s.get("name") if isinstance(s, Mapping) else s for s in secrets]
    containers = pod.get("containers") or []
    names = [c.get("name") for c in containers if isinstance(c, Mapping)]
    if CONTAINER not in names:
        raise SpecError(
            f"{pod_where}.containers",
            f"no container named {CONTAINER}: name the training container "
            f"{CONTAINER}, as training-operator requires",
        )
    if len(containers) > 1:
        others = ", ".join(str(n) for n in names if n != CONTAINER)
        raise SpecError(
            f"{pod_where}.containers", f"only the {CONTAINER} container is run; remove {others}"
        )
    _container(
        containers[0],
        f"{pod_where}.containers[{CONTAINER}]",
        pod.get("volumes") or [],
        pod_where,
        out,
    )


def _container(
    c: Mapping[str, Any], where: str, volumes: list[Any], pod_where: str, out: dict[str, Any]
) -> None:
    _only(
        c,
        where,
        {
            "name",
            "image",
            "imagePullPolicy",
            "command",
            "args",
            "env",
            "resources",
            "ports",
            "volumeMounts",
        },
    )
    if not c.get("image"):
        raise SpecError(
            f"{where}.image", "required: the image that holds your program (and TensorFlow)"
        )
    out["image"] = c["image"]
    if "imagePullPolicy" in c:
        out["imagePullPolicy"] = c["imagePullPolicy"]
    if c.get("command"):
        out["command"] = list(c["command"])
    else:  # the image's ENTRYPOINT runs, as under training-operator (program.py says what holds)
        out["entrypoint"] = "image"
    out["args"] = list(c.get("args") or [])
    env: dict[str, str] = {}
    for i, item in enumerate(c.get("env") or []):
        if not isinstance(item, Mapping) or set(item) - {"name", "value"}:
            raise SpecError(
                f"{where}.env[{i}]",
                "only name and value are carried (valueFrom is not): write the value",
            )
        if item.get("name") == "TF_CONFIG":
            raise SpecError(f"{where}.env[{i}]", "TF_CONFIG is set by tflaunch: remove it")
        env[str(item.get("name"))] = str(item.get("value", ""))
    out["env"] = env
    out["port"] = _port(c.get("ports") or [], f"{where}.ports")
    _resources(_mapping(c, "resources", where), f"{where}.resources", out)
    _checkpoint(c.get("volumeMounts") or [], volumes, where, pod_where, out)


def _port(ports: list[Any], where: str) -> int:
    for i, port in enumerate(ports):
        if isinstance(port, Mapping) and port.get("name") == PORT_NAME:
            return int(port.get("containerPort", DEFAULT_PORT))
        raise SpecError(f"{where}[{i}]", f"only the {PORT_NAME} port is carried: remove it")
    return DEFAULT_PORT


def _resources(resources: Mapping[str, Any], where: str, out: dict[str, Any]) -> None:
    """The container's CPU and memory exactly as the manifest gives them: tflaunch's own
    defaults (1 CPU, 2Gi requested) never apply to a TFJob, which training-operator runs
    with no request it did not write (on a small node, 1 CPU each may not fit)."""
    _only(resources, where, {"requests", "limits"})
    carried: dict[str, Any] = {"requests": {}, "limits": {}}
    gpus: set[int] = set()
    for kind in ("requests", "limits"):
        values = _mapping(resources, kind, where)
        _only(values, f"{where}.{kind}", {"cpu", "memory", GPU})
        if GPU in values:
            gpus.add(int(values[GPU]))
        kept = {k: str(v) for k, v in values.items() if k != GPU}
        if kept:
            carried[kind] = kept
    if len(gpus) > 1:
        raise SpecError(f"{where}.limits.{GPU}", "requests and limits of GPUs must be equal")
    if gpus:
        out["gpusPerWorker"] = gpus.pop()
    out["resources"] = carried


def _checkpoint(
    mounts: list[Any], volumes: list[Any], where: str, pod_where: str, out: dict[str, Any]
) -> None:
    """One PersistentVolumeClaim mounted in the container is carried as spec.checkpoint (the
    one volume a MultiWorkerJob mounts); any other volume is refused by name."""
    claims = {}
    for i, volume in enumerate(volumes):
        claim = volume.get("persistentVolumeClaim") if isinstance(volume, Mapping) else None
        if not isinstance(claim, Mapping) or set(volume) != {"name", "persistentVolumeClaim"}:
            raise SpecError(
                f"{pod_where}.volumes[{i}]",
                "only one persistentVolumeClaim volume "
                "is carried (as spec.checkpoint): remove this one",
            )
        claims[volume["name"]] = claim.get("claimName")
    if len(mounts) > 1 or len(claims) > 1:
        raise SpecError(
            f"{where}.volumeMounts",
            "only one persistentVolumeClaim mount is carried (as spec.checkpoint): keep one",
        )
    if claims and not mounts:
        raise SpecError(f"{pod_where}.volumes", "a volume the container does not mount: remove it")
    if mounts:
        mount = mounts[0]
        if not isinstance(mount, Mapping) or mount.get("name") not in claims:
            raise SpecError(
                f"{where}.volumeMounts[0]",
                "mounts no persistentVolumeClaim volume of the pod: add the volume",
            )
        if set(mount) - {"name", "mountPath"}:
            raise SpecError(f"{where}.volumeMounts[0]", "only name and mountPath are carried")
        out["checkpoint"] = {"claimName": claims[mount["name"]], "mountPath": mount["mountPath"]}


def _run_policy(policy: Mapping[str, Any], out: dict[str, Any]) -> None:
    where = "spec.runPolicy"
    _only(policy, where, {"cleanPodPolicy", "schedulingPolicy", "managedBy", *_RUN_POLICY_FIELDS})
    if policy.get("managedBy") not in (None, "", MANAGED_BY):
        raise SpecError(
            f"{where}.managedBy",
            f"names another controller ({policy['managedBy']}), which runs this TFJob: "
            f"remove it, or set {MANAGED_BY}, to run it with tflaunch",
        )
    if policy.get("cleanPodPolicy", "None") != "None":
        raise SpecError(
            f"{where}.cleanPodPolicy",
            "only None is carried: a finished job's pods "
            "stay until ttlSecondsAfterFinished deletes the job",
        )
    for key, field in _RUN_POLICY_FIELDS.items():
        if key in policy:
            out[field] = policy[key]
    restart = out.pop("_restartPolicy")
    if restart == "Never" and "backoffLimit" not in policy:
        out["backoffLimit"] = 0  # training-operator restarts nothing under Never
    scheduling = _mapping(policy, "schedulingPolicy", where)
    _only(scheduling, f"{where}.schedulingPolicy", {"queue", "minAvailable", "priorityClass"})
    if "priorityClass" in scheduling:
        out["priorityClassName"] = scheduling["priorityClass"]
    if "minAvailable" in scheduling and scheduling["minAvailable"] != out["workers"]:
        raise SpecError(
            f"{where}.schedulingPolicy.minAvailable",
            f"must equal the replicas "
            f"({out['workers']}): MultiWorkerMirroredStrategy needs every worker",
        )
    if "queue" in scheduling and out.get("layout") == "per-worker":
        raise SpecError(
            f"{where}.schedulingPolicy.queue",
            "Kueue admits one Indexed Job, and a Chief needs a Job per pod (its TF_CONFIG "
            "differs): move the chief into Worker (worker 0 is MultiWorkerMirroredStrategy's "
            "chief) or remove the queue",
        )
    if "queue" in scheduling:
        out["queueName"] = scheduling["queue"]
        out["gang"] = "kueue"


def _success_policy(policy: Any) -> str:
    """training-operator's default: the chief (worker 0 without one) decides."""
    if policy not in (None, "", "AllWorkers"):
        raise SpecError("spec.successPolicy", 'must be "" (the default) or AllWorkers')
    return "allWorkers" if policy == "AllWorkers" else "chief"


def _mapping(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = parent.get(key) or {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{where}.{key}".lstrip("."), "must be a mapping")
    return value


def _only(value: Mapping[str, Any], where: str, known: set[str]) -> None:
    for key in value:
        if key not in known:
            raise SpecError(
                f"{where}.{key}".lstrip("."),
                "is not carried by tflaunch: remove it "
                "(docs/migrating-from-tfjob.md lists what is)",
            )


def notes(tfjob: Mapping[str, Any]) -> list[str]:
    """What a converted TFJob does differently from training-operator, one line per field
    (`tflaunch convert` prints them as comments)."""
    written = tfjob.get("spec", {}).get("tfReplicaSpecs", {})
    replicas = {_REPLICA_TYPES.get(str(k).lower(), k): v for k, v in written.items()}
    chief = next((c for c in CHIEFS if c in replicas), None)
    policy = replicas.get(chief or "Worker", {}).get("restartPolicy", "Never")
    lines = [
        f"restartPolicy {policy}: a failure restarts the whole worker group (up to "
        "backoffLimit), never one pod alone; retryable exit codes are tflaunch's table",
        _success_note(tfjob.get("spec", {}).get("successPolicy")),
        "TF_CONFIG: training-operator's tasks and keys, with tflaunch's host names "
        "(<name>-worker-<i>, resolvable before the pods are Ready)",
    ]
    if chief is not None:
        lines.append(
            f"{chief}: tflaunch's worker 0 (host <name>-worker-0), the TFJob's worker i its "
            "worker i+1; layout per-worker (one Job each, for the chief's own TF_CONFIG)"
        )
    if chief == "Master":
        lines.append(
            "Master: task.type master, as training-operator gives it; TensorFlow 2's "
            "MultiWorkerMirroredStrategy refuses a master job: rename the replica Chief"
        )
    if "schedulingPolicy" in tfjob.get("spec", {}).get("runPolicy", {}):
        lines.append("runPolicy.schedulingPolicy: queue is a Kueue LocalQueue (gang: kueue)")
    return lines


def _success_note(policy: Any) -> str:
    if policy == "AllWorkers":
        return "successPolicy AllWorkers: successPolicy allWorkers, every worker must exit 0"
    return (
        "successPolicy (default): successPolicy chief, the job succeeds when worker 0 (the "
        "chief) exits 0 and the workers still running are stopped"
    )
