"""The environment tflaunch sets in every worker pod, and so what `spec.env` may not set.

`render` writes `tflaunch_env()` into each trainer container, then `spec.env`;
`reserved()` is derived from the same list, so a variable tflaunch starts to set is refused
in `spec.env` at once (a user's value would otherwise silently override it). The trainer
image's own variables (its Dockerfile) are not rendered and are listed in `IMAGE_ENV`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from launcher.api.spec import MultiWorkerJob
from launcher.core import contract, labels, restart, tfconfig, workload

COMPLETION_INDEX_FIELD = f"metadata.annotations['{labels.COMPLETION_INDEX}']"
IMAGE_ENV = {contract.ENV_DATA: "set by the trainer image; set it with spec.trainer.dataPath"}
"""Variables the trainer image sets (docker/), and what sets them instead."""


@dataclasses.dataclass(frozen=True)
class SetEnv:
    """One variable tflaunch sets, and why (what a user who tries to set it is told)."""

    name: str
    why: str
    value: str | None = None
    value_from: dict[str, Any] | None = None

    def entry(self) -> dict[str, Any]:
        """The container's `env` entry."""
        if self.value_from is not None:
            return {"name": self.name, "valueFrom": self.value_from}
        return {"name": self.name, "value": self.value}


JOB_UID = SetEnv(
    contract.ENV_JOB_UID,
    "set by tflaunch from the pod's Job (spec.restart inPlace)",
    value_from={"fieldRef": {"fieldPath": f"metadata.labels['{labels.JOB_CONTROLLER_UID}']"}},
)
"""Where the wrapper learns which Job's generation to continue (`trainer.generation_file`)."""


def tflaunch_env(job: MultiWorkerJob, index: int | None, restarts: int | None) -> list[SetEnv]:
    """What tflaunch sets in worker `index` (None: the Indexed Job's pods, which read their
    index from Kubernetes), in order; `restarts` (the operator's group restarts so far) goes
    in $TFLAUNCH_RESTARTS when given."""
    shape = job.spec.tf_config
    cluster = tfconfig.cluster_spec(tfconfig.job_addresses(job), shape)
    index_why = "set by tflaunch from each pod's completion index"
    env = [
        # WORKER_INDEX must come before TF_CONFIG: Kubernetes expands $(WORKER_INDEX) in order.
        SetEnv(contract.ENV_WORKER_INDEX, index_why, value_from=_completion_index())
        if index is None
        else SetEnv(contract.ENV_WORKER_INDEX, index_why, str(index)),
        SetEnv(
            contract.ENV_TF_CONFIG,
            "set by tflaunch from metadata.name, metadata.namespace, spec.workers, spec.port "
            "spec.clusterDomain and spec.tfConfig",
            tfconfig.tf_config_json(cluster, index, shape),
        ),
        SetEnv("HOME", "set by tflaunch to /tmp (the root filesystem is read-only)", "/tmp"),
        *(
            SetEnv(name, _TRAINER_ENV_WHY.get(name, f"set by tflaunch to {value}"), value)
            for name, value in workload.tflaunch_env(job).items()
        ),
    ]
    if restart.in_place(job.spec):
        env.append(JOB_UID)
    if restarts is not None:
        env.append(
            SetEnv(
                contract.ENV_RESTARTS,
                "set by tflaunch to the number of group restarts so far",
                str(restarts),
            )
        )
    return env


_TRAINER_ENV_WHY = {
    contract.ENV_LEGACY_KERAS: "set by tflaunch from spec.keras (tf-keras or keras3; auto: "
    "from what the program does)"
}
"""What a user who sets one of `workload.tflaunch_env` is told, where more than its value
helps (only the error message uses it)."""


def reserved(job: MultiWorkerJob) -> dict[str, str]:
    """Every variable `spec.env` may not set, and why: what `render` sets (the operator's
    children too, with $TFLAUNCH_RESTARTS) and what the image sets."""
    rendered = tflaunch_env(job, 0, restarts=0)  # the names are every member's
    return {**IMAGE_ENV, **{e.name: e.why for e in (*rendered, JOB_UID)}}


def _completion_index() -> dict[str, Any]:
    return {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}
