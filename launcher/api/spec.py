"""The job spec: one typed model of a MultiWorkerJob (types only).

The file format is Kubernetes-shaped (`apiVersion: tflaunch.dev/v1alpha1`, `kind:
MultiWorkerJob`) so that the same file can be rendered by the CLI or applied to the
operator. Field names in files are camelCase; each dataclass field carries its file key and
a one-line doc in its metadata, which is also what the CRD schema is generated from.

Loading and validation live apart, in `launcher.core.load`: everything a user can get wrong
is caught there, as a `SpecError` naming the field and the fix, before anything is rendered
or applied (types by `launcher.core.typed` as the document is built into these dataclasses,
the rest by `launcher.core.validation`). Each field's bounds here come from
`launcher.api.rules`, the table the CRD's schema and the checks share.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from launcher.api import rules
from launcher.api.identity import API_VERSION, KIND

METADATA_ADDRESS = "169.254.169.254"
"""The cloud metadata service (instance credentials on AWS, GCP, Azure)."""

DEFAULT_TERMINATION_GRACE_SECONDS = 60
"""SIGTERM to SIGKILL. A preempted group needs: <= 1 s to notice, one execution
(steps_per_execution steps) for every worker to reach the agreed step, the save, the exit.
The reference MNIST job needs a few seconds (docs/preemption.md has the measurement); 60 s
leaves room for a bigger model or a slower volume, while a node drain still goes quickly."""

MAX_NAME_LENGTH = rules.MAX_NAME_LENGTH
MAX_WORKERS = rules.MAX_WORKERS
INT32_MAX = rules.INT32_MAX
DNS_1123_SUBDOMAIN = rules.DNS_1123_SUBDOMAIN
SCRIPT_MOUNT_PATH = "/opt/tflaunch/script"
"""Where a spec.script's files are mounted in each worker."""
_NAME = {"pattern": DNS_1123_SUBDOMAIN, "maxLength": 253}


def _field(
    key: str,
    doc: str,
    default: Any = dataclasses.MISSING,
    factory: Any = None,
    **bounds: Any,
) -> Any:
    """A dataclass field that knows its camelCase file key and its documentation.

    `bounds` (minimum, maximum, pattern, maxLength) are checked as the document is typed
    (`launcher.core.typed`) and go into the CRD's schema: one statement of each limit.
    """
    metadata = {"key": key, "doc": doc, "bounds": bounds}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class ResourceList:
    """CPU and memory quantities, Kubernetes notation ("500m", "2Gi")."""

    cpu: str | None = _field("cpu", "CPU quantity, e.g. 500m or 2.", None)
    memory: str | None = _field("memory", "Memory quantity, e.g. 2Gi.", None)


@dataclasses.dataclass(frozen=True)
class Resources:
    """Requests and limits of each worker's trainer container (GPUs come from gpusPerWorker)."""

    requests: ResourceList = _field(
        "requests", "Guaranteed resources.", factory=lambda: ResourceList("1", "2Gi")
    )
    limits: ResourceList = _field(
        "limits", "Upper bounds.", factory=lambda: ResourceList("2", "4Gi")
    )


Precision = Literal["auto", "float32", "mixed"]


@dataclasses.dataclass(frozen=True)
class TrainerArgs:
    """Arguments of `python -m trainer` in every worker."""

    epochs: int = _field("epochs", "Training epochs.", 3, minimum=1, maximum=INT32_MAX)
    global_batch_size: int = _field(
        "globalBatchSize",
        "Global batch, split across all replicas (workers x GPUs); must divide evenly.",
        256,
        minimum=1,
        maximum=INT32_MAX,
    )
    steps_per_epoch: int | None = _field(
        "stepsPerEpoch",
        "Cap on steps per epoch; default: the whole training set.",
        None,
        minimum=1,
        maximum=INT32_MAX,
    )
    save_freq: int | str = _field("saveFreq", 'Checkpoint every N steps, or "epoch".', "epoch")
    learning_rate: float = _field("learningRate", "Adam learning rate.", 0.001)
    data_path: str | None = _field(
        "dataPath", "mnist.npz inside the pod; default: the copy baked into the image.", None
    )
    rendezvous_timeout_seconds: int = _field(
        "rendezvousTimeoutSeconds",
        "How long a worker waits for every peer to resolve and accept TCP before failing.",
        300,
        minimum=1,
        maximum=INT32_MAX,
    )
    stall_timeout_seconds: int = _field(
        "stallTimeoutSeconds",
        "A worker exits (and the group restarts) when no training step finishes for this "
        "long: a peer froze or hangs outside TensorFlow. Dead peers are caught in seconds.",
        300,
        minimum=1,
        maximum=INT32_MAX,
    )
    collective_timeout_seconds: int | None = _field(
        "collectiveTimeoutSeconds",
        "Per-collective timeout (TensorFlow's CommunicationOptions; a debugging aid that "
        "costs a thread per collective); default: none.",
        None,
        minimum=1,
        maximum=INT32_MAX,
    )
    precision: Precision = _field(
        "precision",
        "Compute dtype: mixed = bfloat16 on CPU, float16 on GPU (float32 weights); auto = "
        "bfloat16 on CPUs with AMX, float16 on GPUs of compute capability >= 7.0, float32 "
        "otherwise; the worker logs its choice and why (docs/performance.md).",
        "auto",
    )
    jit_compile: bool = _field(
        "jitCompile", "Compile the train step with XLA (measured slower on CPU).", False
    )
    heartbeat_timeout_seconds: int | None = _field(
        "heartbeatTimeoutSeconds",
        "A peer silent this long is dead and the group restarts (coordination service); "
        "shorter detects sooner but takes a CPU-starved worker for dead; default: "
        "TensorFlow's 10 s.",
        None,
        minimum=2,
        maximum=INT32_MAX,
    )
    extra_args: tuple[str, ...] = _field(
        "extraArgs", "More arguments appended to the trainer's command line.", factory=tuple
    )


@dataclasses.dataclass(frozen=True)
class Script:
    """Your own program (at most 1 MiB of text), mounted read-only into every worker: its
    entry file, and the other files of its directory that it needs (a module it imports)."""

    name: str = _field("name", "The entry file's name, e.g. main.py.")
    source: str = _field("source", "The entry file's text.")
    files: dict[str, str] = _field(
        "files",
        "The program's other files, by path relative to the entry file's directory (e.g. "
        "mnist_setup.py, utils/data.py), with their text; mounted with that layout.",
        factory=dict,
    )


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Where checkpoints and the final model live. Resume after a restart needs a PVC."""

    claim_name: str | None = _field(
        "claimName",
        "An existing PersistentVolumeClaim (ReadWriteMany for several workers); "
        "default: an emptyDir, which does not survive pod restarts.",
        None,
    )
    mount_path: str = _field("mountPath", "Mount path in the trainer container.", "/checkpoints")
    run: str | None = _field(
        "run",
        "Continue this earlier run: its checkpoints are read and written (the run id "
        "`tflaunch submit` printed, or the MultiWorkerJob's uid). Default: a new run, "
        "kept across group restarts and unchanged resubmits.",
        None,
    )


@dataclasses.dataclass(frozen=True)
class Toleration:
    """A pod toleration (core/v1 Toleration), e.g. for GPU node taints."""

    key: str = _field("key", "Taint key; empty with operator Exists tolerates every taint.", "")
    operator: Literal["Exists", "Equal"] = _field("operator", "Exists or Equal.", "Equal")
    value: str = _field("value", "Taint value (operator Equal).", "")
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = _field(
        "effect", "Taint effect to tolerate; empty: all effects.", ""
    )
    toleration_seconds: int | None = _field(
        "tolerationSeconds", "How long to stay bound to a NoExecute-tainted node.", None
    )


@dataclasses.dataclass(frozen=True)
class EgressTarget:
    """A destination the workers may reach with egress: peers (object storage, a dataset
    host, a proxy)."""

    cidr: str = _field("cidr", "Its addresses, e.g. 10.20.0.0/16 or 203.0.113.7/32.")
    port: int | None = _field(
        "port", "Its port; default: every port.", None, minimum=1, maximum=65535
    )
    protocol: Literal["TCP", "UDP"] = _field("protocol", "TCP or UDP (with port).", "TCP")


@dataclasses.dataclass(frozen=True)
class TFConfigShape:
    """Default: every worker is task `worker` (worker 0 is MultiWorkerMirroredStrategy's
    chief); a Kubeflow TFJob's Chief and "environment" are set here."""

    chief: Literal["", "chief", "master"] = _field(
        "chief",
        "TF_CONFIG's task type of worker 0 (chief, or master for a TFJob's Master replica); "
        "workers 1..N-1 are then task.type worker 0..N-2. Needs layout: per-worker and your own "
        "program (spec.command or spec.script).",
        "",
    )
    environment: Literal["", "cloud"] = _field(
        "environment", "TF_CONFIG's \"environment\" key (a TFJob's is cloud); default: none.", ""
    )


Layout = Literal["indexed", "per-worker"]
Gang = Literal["none", "kueue", "volcano", "coscheduling"]
PullPolicy = Literal["Always", "IfNotPresent", "Never"]
Keras = Literal["auto", "tf-keras", "keras3"]
Entrypoint = Literal["wrapper", "image"]
Restart = Literal["recreate", "inPlace"]
Egress = Literal["open", "peers"]
SuccessPolicy = Literal["allWorkers", "chief"]


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """What to run and how: the `spec` of a MultiWorkerJob."""

    image: str = _field("image", "Trainer image, e.g. registry.example.com/tflaunch-trainer:0.1.0.")
    image_pull_policy: PullPolicy | None = _field(
        "imagePullPolicy",
        "Always, IfNotPresent (e.g. images loaded into kind) or Never; unset, Kubernetes' "
        "default: Always for a :latest or untagged image, else IfNotPresent.",
        None,
    )
    workers: int = _field(
        "workers", "Number of worker pods (MWMS workers).", 2, minimum=1, maximum=MAX_WORKERS
    )
    gpus_per_worker: int = _field(
        "gpusPerWorker",
        "nvidia.com/gpu limit of each worker; 0 for CPU.",
        0,
        minimum=0,
        maximum=INT32_MAX,
    )
    resources: Resources = _field("resources", "CPU/memory of each worker.", factory=Resources)
    shm_size: str = _field(
        "shmSize",
        "Size of the memory-backed /dev/shm of GPU workers (NCCL's shared-memory transport, "
        "tf.data); it counts against the memory limit.",
        "1Gi",
    )
    port: int = _field("port", "TensorFlow gRPC port of each worker.", 2222)
    cluster_domain: str = _field(
        "clusterDomain",
        "The cluster's DNS domain, used in TF_CONFIG host names.",
        "cluster.local",
        pattern=DNS_1123_SUBDOMAIN,
        maxLength=253,
    )
    layout: Layout = _field(
        "layout",
        "indexed: one Indexed Job, index from Kubernetes; per-worker: one Job per worker "
        "with its literal TF_CONFIG.",
        "indexed",
    )
    tf_config: TFConfigShape = _field(
        "tfConfig", "The task names in TF_CONFIG.", factory=TFConfigShape
    )
    trainer: TrainerArgs = _field(
        "trainer",
        "Arguments of the built-in MNIST trainer (not with spec.command or spec.script).",
        factory=TrainerArgs,
    )
    command: tuple[str, ...] = _field(
        "command",
        "Your own training program, run by every worker through the worker wrapper (python "
        "-m trainer.run), e.g. [python, /app/train.py]; default: the built-in MNIST trainer.",
        factory=tuple,
    )
    args: tuple[str, ...] = _field(
        "args", "Arguments of spec.command (or of spec.script).", factory=tuple
    )
    entrypoint: Entrypoint = _field(
        "entrypoint",
        "wrapper: the workers run the worker wrapper, which runs the program; image: they run "
        "the image's own ENTRYPOINT (spec.args as its CMD), unwrapped (a TFJob with no "
        "command): TF_CONFIG, peer names, env, backoffLimit and successPolicy apply, the "
        "wrapper's preflight, exit codes, restart in place and stall stop do not.",
        "wrapper",
    )
    script: Script | None = _field(
        "script",
        f"Your own program, stored in a ConfigMap owned by the job and mounted read-only at "
        f"{SCRIPT_MOUNT_PATH}/ (its files keep their layout); runs as `python` NAME "
        "unless spec.command is set. The tflaunch CLI also takes a path (relative to the spec "
        "file): a file (with the modules beside it that it imports) or a directory (all its "
        "files; the entry is main.py).",
        None,
    )
    keras: Keras = _field(
        "keras",
        "With spec.command or spec.script: the Keras that tf.keras is, tf-keras "
        "(TF_USE_LEGACY_KERAS=1) or keras3; auto: tf-keras for MultiWorkerMirroredStrategy "
        "on several workers (Keras 3's fit fails there), else what spec.script is written for.",
        "auto",
    )
    rendezvous_timeout_seconds: int | None = _field(
        "rendezvousTimeoutSeconds",
        "With spec.command or spec.script: how long a worker waits for every peer before "
        "failing (default 300; the built-in trainer's is spec.trainer's).",
        None,
        maximum=INT32_MAX,
    )
    stall_timeout_seconds: int | None = _field(
        "stallTimeoutSeconds",
        "With spec.command or spec.script: stop the program, and restart the group, when it "
        "writes no output and no checkpoint for this long (default: off; the built-in "
        "trainer's is spec.trainer's).",
        None,
        maximum=INT32_MAX,
    )
    env: dict[str, str] = _field(
        "env",
        "Extra environment variables of the trainer; TFLAUNCH_LOG_LEVEL=debug shows "
        "TensorFlow's own log lines.",
        factory=dict,
    )
    node_selector: dict[str, str] = _field("nodeSelector", "Pod nodeSelector.", factory=dict)
    tolerations: tuple[Toleration, ...] = _field(
        "tolerations", "Pod tolerations (e.g. for GPU node taints).", factory=tuple
    )
    affinity: dict[str, Any] = _field(
        "affinity", "Pod affinity.", factory=dict, upstream="io.k8s.api.core.v1.Affinity"
    )
    priority_class_name: str | None = _field(
        "priorityClassName", "Pod priority class.", None, **_NAME
    )
    service_account_name: str | None = _field(
        "serviceAccountName", "Pod service account; its token is not mounted.", None, **_NAME
    )
    scheduler_name: str | None = _field(
        "schedulerName",
        "Pod scheduler: volcano with gang: volcano (its default there), the scheduler that "
        "runs the Coscheduling plugin with gang: coscheduling unless it is the default one.",
        None,
        **_NAME,
    )
    gang: Gang = _field(
        "gang",
        "Gang scheduling, so that all workers start together or none does: none; kueue (the "
        "queue label, created suspended until Kueue admits the one Job; layout indexed); "
        "volcano (a scheduling.volcano.sh PodGroup with minMember = workers); coscheduling "
        "(a scheduler-plugins scheduling.x-k8s.io PodGroup with minMember = workers).",
        "none",
    )
    queue_name: str | None = _field(
        "queueName",
        "The Kueue LocalQueue (gang: kueue, required) or the Volcano queue (gang: volcano; "
        "default: Volcano's default queue).",
        None,
        pattern=DNS_1123_SUBDOMAIN,
        maxLength=63,
    )
    image_pull_secrets: tuple[str, ...] = _field(
        "imagePullSecrets", "Names of Secrets for pulling the image.", factory=tuple
    )
    labels: dict[str, str] = _field(
        "labels",
        "Extra labels on every object and pod (e.g. kueue.x-k8s.io/queue-name).",
        factory=dict,
    )
    annotations: dict[str, str] = _field(
        "annotations", "Extra annotations on every object and pod.", factory=dict
    )
    checkpoint: Checkpoint = _field("checkpoint", "Checkpoint volume.", factory=Checkpoint)
    backoff_limit: int = _field(
        "backoffLimit",
        "How many times the worker group may be restarted after a failure.",
        3,
        minimum=0,
        maximum=INT32_MAX,
    )
    restart: Restart | None = _field(
        "restart",
        "How the group restarts after a worker's program fails: inPlace (every worker's "
        "wrapper relaunches its program in the same pod, together, up to backoffLimit times) "
        "or recreate (the failed pods are replaced); default: inPlace wherever the workers run "
        "the worker wrapper, recreate with entrypoint: image or port 65535 "
        "(docs/restart-in-place.md).",
        None,
    )
    success_policy: SuccessPolicy = _field(
        "successPolicy",
        "When the job has succeeded: allWorkers (every worker exits 0) or chief (worker 0 "
        "exits 0, a Kubeflow TFJob's default; the workers still running are then stopped).",
        "allWorkers",
    )
    termination_grace_period_seconds: int = _field(
        "terminationGracePeriodSeconds",
        "Seconds from SIGTERM (eviction, drain, preemption) to SIGKILL, for pods and "
        "`tflaunch local` alike: every worker finishes its step and saves in this time, "
        "then exits 79 and the group resumes there (docs/preemption.md).",
        DEFAULT_TERMINATION_GRACE_SECONDS,
        minimum=1,
        maximum=INT32_MAX,
    )
    active_deadline_seconds: int | None = _field(
        "activeDeadlineSeconds",
        "Wall-clock limit of the whole job.",
        None,
        minimum=1,
        maximum=INT32_MAX,
    )
    ttl_seconds_after_finished: int | None = _field(
        "ttlSecondsAfterFinished",
        "Delete the finished job (and its pods) after this many seconds.",
        86400,
        minimum=0,
        maximum=INT32_MAX,
    )
    suspend: bool = _field("suspend", "Create the job suspended (e.g. for Kueue).", False)
    network_policy: bool = _field(
        "networkPolicy",
        "Render a NetworkPolicy admitting only this job's own workers: to the port, or to "
        "every TCP port when GPUs are used (NCCL connects on ports of its own).",
        True,
    )
    deny_metadata_egress: bool = _field(
        "denyMetadataEgress",
        "The NetworkPolicy also denies the workers' egress to the cloud metadata address "
        f"{METADATA_ADDRESS} (instance credentials); needs networkPolicy.",
        False,
    )
    egress: Egress = _field(
        "egress",
        "The workers' egress: open (not limited, denyMetadataEgress aside) or peers: only to "
        "this job's workers, DNS (port 53) and egressTo, so neither the API server nor the "
        "node's ports; needs networkPolicy.",
        "open",
    )
    egress_to: tuple[EgressTarget, ...] = _field(
        "egressTo",
        "With egress: peers, what else the workers may reach (object storage, a dataset host).",
        factory=tuple,
    )


@dataclasses.dataclass(frozen=True)
class Metadata:
    name: str = _field("name", "Job name: a DNS-1035 label.")
    namespace: str = _field("namespace", "Kubernetes namespace.", "default")


@dataclasses.dataclass(frozen=True)
class MultiWorkerJob:
    """A whole job spec file."""

    api_version: str = _field("apiVersion", f"Always {API_VERSION}.")
    kind: str = _field("kind", f"Always {KIND}.")
    metadata: Metadata = _field("metadata", "Name and namespace.")
    spec: JobSpec = _field("spec", "The job.")

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def replicas(self) -> int:
        """Replicas in sync across the job: one per GPU, or one per CPU-only worker."""
        return self.spec.workers * max(1, self.spec.gpus_per_worker)
