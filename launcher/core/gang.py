"""Gang scheduling (`spec.gang`): what each scheduler needs so that all workers start together.

MultiWorkerMirroredStrategy cannot start with some of its workers: the ones that run wait
at the rendezvous, holding their GPUs, for peers that are not scheduled. So each gang
scheduler gets the one object and the pod metadata it reads:

* volcano: a `scheduling.volcano.sh/v1beta1` PodGroup with minMember = workers, every pod
  annotated into it (`scheduling.k8s.io/group-name`) and scheduled by `volcano`.
* coscheduling (scheduler-plugins): a `scheduling.x-k8s.io/v1alpha1` PodGroup with
  minMember = workers, every pod labelled into it (`scheduling.x-k8s.io/pod-group`).
* kueue: no object; the Job carries the queue label and is created suspended, and Kueue
  resumes it once its one workload (all N pods of the indexed Job) is admitted.

The PodGroup is one more object of the job: owned by the Job (CLI) or by the MultiWorkerJob
(operator), so it is deleted with them. Pure: no cluster access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from launcher.core import labels, names

if TYPE_CHECKING:  # spec imports schemas, which imports this module
    from launcher.api.spec import MultiWorkerJob

VOLCANO_API = "scheduling.volcano.sh/v1beta1"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_SCHEDULER = "volcano"
COSCHEDULING_API = "scheduling.x-k8s.io/v1alpha1"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

POD_GROUP_APIS = {"volcano": VOLCANO_API, "coscheduling": COSCHEDULING_API}
"""The PodGroup's apiVersion for each gang that has one."""


def pod_group(job: MultiWorkerJob) -> dict[str, Any] | None:
    """The job's PodGroup, or None when its gang needs none."""
    spec = job.spec
    api_version = POD_GROUP_APIS.get(spec.gang)
    if api_version is None:
        return None
    group_spec: dict[str, Any] = {"minMember": spec.workers}
    if spec.gang == "volcano":
        if spec.queue_name is not None:
            group_spec["queue"] = spec.queue_name
        if spec.priority_class_name is not None:
            group_spec["priorityClassName"] = spec.priority_class_name
    metadata: dict[str, Any] = {
        "name": names.pod_group_name(job.name),
        "namespace": job.namespace,
        "labels": {**spec.labels, **labels.job_labels(job.name)},
    }
    if spec.annotations:
        metadata["annotations"] = dict(spec.annotations)
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": metadata, "spec": group_spec}


def pod_labels(job: MultiWorkerJob) -> dict[str, str]:
    """Labels every worker pod gets for its gang."""
    if job.spec.gang == "coscheduling":
        return {COSCHEDULING_LABEL: names.pod_group_name(job.name)}
    return {}


def pod_annotations(job: MultiWorkerJob) -> dict[str, str]:
    """Annotations every worker pod gets for its gang."""
    if job.spec.gang == "volcano":
        return {VOLCANO_GROUP_ANNOTATION: names.pod_group_name(job.name)}
    return {}


def job_labels(job: MultiWorkerJob) -> dict[str, str]:
    """Labels on the Job objects themselves (Kueue reads its queue from the Job)."""
    if job.spec.gang == "kueue" and job.spec.queue_name is not None:
        return {KUEUE_QUEUE_LABEL: job.spec.queue_name}
    return {}


def scheduler_name(job: MultiWorkerJob) -> str | None:
    """The pods' schedulerName: spec.schedulerName, or volcano for gang: volcano."""
    if job.spec.gang == "volcano":
        return job.spec.scheduler_name or VOLCANO_SCHEDULER
    return job.spec.scheduler_name


def suspend_at_creation(job: MultiWorkerJob) -> bool:
    """Kueue admits a Job by resuming it, so under Kueue every Job starts suspended."""
    return job.spec.suspend or job.spec.gang == "kueue"
