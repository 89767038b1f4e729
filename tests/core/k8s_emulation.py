"""What Kubernetes does to a rendered pod template, emulated for the tests.

The indexed layout relies on two cluster behaviours that no renderer can show: the Job
controller's per-index pod hostname and completion-index annotation, and the kubelet's
`$(VAR)` expansion of env values from variables declared earlier in the list. These
helpers reproduce both (per the Kubernetes docs) so the tests can see each pod's real env.
"""

from __future__ import annotations

import re
from typing import Any

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_UID = "5e0f8a3c-1d2b-4f6e-8a7c-9b0d1e2f3a4b"
"""The uid the emulated API server gives a Job that has none."""


def expand(value: str, defined: dict[str, str]) -> str:
    """Kubernetes' env expansion: `$(VAR)` from earlier vars, `$$` -> `$`, unknown left as is."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return defined.get(name, match.group(0))

    return _REFERENCE.sub(substitute, value)


def field_ref(pod: dict[str, Any], path: str) -> str:
    """A fieldRef's value; a label or annotation the pod lacks is "" (as the kubelet's)."""
    match = re.fullmatch(r"metadata\.(annotations|labels)\['([^']+)'\]", path)
    if match:
        return str(pod["metadata"].get(match.group(1), {}).get(match.group(2), ""))
    if path == "metadata.name":
        return str(pod["metadata"]["name"])
    raise NotImplementedError(path)


def pods_of_job(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods the Job controller would create: one per index (or one for a plain Job)."""
    template = job["spec"]["template"]
    indexed = job["spec"].get("completionMode") == "Indexed"
    count = job["spec"]["completions"] if indexed else 1
    pods = []
    for index in range(count):
        metadata = {
            "name": f"{job['metadata']['name']}-{index if indexed else 0}-abcde",
            "namespace": job["metadata"]["namespace"],
            # The API server puts the Job's uid in its selector and so in every pod's labels.
            "labels": {
                **template["metadata"].get("labels", {}),
                JOB_CONTROLLER_UID: job["metadata"].get("uid", JOB_UID),
            },
            "annotations": dict(template["metadata"].get("annotations", {})),
        }
        spec = dict(template["spec"])
        if indexed:
            metadata["annotations"][COMPLETION_INDEX] = str(index)
            metadata["labels"][COMPLETION_INDEX] = str(index)
            spec.setdefault("hostname", f"{job['metadata']['name']}-{index}")
        pods.append({"metadata": metadata, "spec": spec})
    return pods


def container_env(pod: dict[str, Any], container: str = "trainer") -> dict[str, str]:
    """The env the container really sees, after downward API and `$(VAR)` expansion."""
    (spec,) = [c for c in pod["spec"]["containers"] if c["name"] == container]
    env: dict[str, str] = {}
    for item in spec.get("env", []):
        if "valueFrom" in item:
            env[item["name"]] = field_ref(pod, item["valueFrom"]["fieldRef"]["fieldPath"])
        else:
            env[item["name"]] = expand(item.get("value", ""), env)
    return env


def pod_fqdn(pod: dict[str, Any], cluster_domain: str) -> str:
    spec, metadata = pod["spec"], pod["metadata"]
    return f"{spec['hostname']}.{spec['subdomain']}.{metadata['namespace']}.svc.{cluster_domain}"
