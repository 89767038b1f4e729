"""What `tflaunch render` accepts, the real API server accepts (issue 11).

Hypothesis generates job specs across every field a user sets (workers, GPUs, names,
namespaces, ports, env, labels, annotations, resources, tolerations, limits...). Each spec
either fails in `load_job` with a SpecError, or renders; every rendered object then goes to
the real control plane as a server-side dry-run, many objects per kubectl call. A refusal by
the server of anything render accepted is a bug in the launcher's validation.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.core import render
from launcher.core.errors import SpecError
from launcher.core.load import job_from_document

NAMESPACES = ("tfl-prop-a", "tfl-prop-" + "n" * 54)
"""Created by the test (the longest one is 63 characters, as long as a namespace can be)."""

BATCH = 150
"""Objects per kubectl call."""

label_names = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?", fullmatch=True)
prefixes = st.sampled_from(
    ["", "example.com/", "kueue.x-k8s.io/", "kubernetes.io/", "batch.kubernetes.io/", "k8s.io/"]
)
keys = st.builds(lambda p, n: p + n, prefixes, label_names)
label_values = st.one_of(st.just(""), label_names)
env_names = st.one_of(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True),
    st.sampled_from(
        [
            *("HOME", "TF_CONFIG", "WORKER_INDEX", "TF_USE_LEGACY_KERAS", "TFLAUNCH_DATA"),
            *("TFLAUNCH_LOG_LEVEL", "TFLAUNCH_X", "PATH"),
        ]
    ),
)
cpu = st.one_of(
    st.integers(1, 64).map(str), st.integers(1, 64000).map(lambda m: f"{m}m"), st.just("0.5")
)
memory = st.one_of(
    st.integers(1, 512).map(lambda g: f"{g}Gi"),
    st.integers(1, 10**6).map(lambda m: f"{m}Mi"),
    st.integers(1, 10**12).map(str),
)
int32_edge = st.sampled_from([0, 1, 60, 86400, 2**31 - 1, 2**31, 2**40])
tolerations = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"key": st.just("nvidia.com/gpu"), "operator": st.just("Exists")},
            optional={"effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])},
        ),
        st.fixed_dictionaries(
            {"key": label_names, "operator": st.just("Equal"), "value": label_values},
            optional={
                "effect": st.sampled_from(["NoExecute"]),
                "tolerationSeconds": st.integers(0, 10**6),
            },
        ),
    ),
    max_size=2,
)

affinity = st.one_of(
    st.just({}),
    st.builds(
        lambda key, values: {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
                    ]
                }
            }
        },
        keys,
        st.lists(label_names, min_size=1, max_size=2),
    ),
)


def _spec() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"image": st.just("registry.example.com/tflaunch-trainer:0.1.0")},
        optional={
            "workers": st.one_of(*[st.integers(1, 6)] * 4, st.sampled_from([64, 700, 3000])),
            "gpusPerWorker": st.integers(0, 8),
            "port": st.sampled_from([1, 80, 1023, 1024, 2222, 65535]),
            "layout": st.sampled_from(["indexed", "per-worker"]),
            "env": st.dictionaries(env_names, st.text(max_size=8), max_size=3),
            "labels": st.dictionaries(keys, label_values, max_size=2),
            "annotations": st.dictionaries(keys, st.text(max_size=10), max_size=2),
            "nodeSelector": st.dictionaries(keys, label_values, max_size=2),
            "resources": st.fixed_dictionaries(
                {},
                optional={
                    "requests": st.fixed_dictionaries({}, optional={"cpu": cpu, "memory": memory}),
                    "limits": st.fixed_dictionaries({}, optional={"cpu": cpu, "memory": memory}),
                },
            ),
            "tolerations": tolerations,
            "affinity": affinity,
            "shmSize": st.sampled_from(["64Mi", "1Gi", "3.5Gi", "16Gi"]),
            "backoffLimit": int32_edge,
            "activeDeadlineSeconds": st.one_of(st.none(), int32_edge),
            "ttlSecondsAfterFinished": st.one_of(st.none(), int32_edge),
            "suspend": st.just(True),
            "networkPolicy": st.booleans(),
            "denyMetadataEgress": st.booleans(),
            "checkpoint": st.fixed_dictionaries(
                {"mountPath": st.sampled_from(["/checkpoints", "/tmp", "/ckpt/", "/tmp/"])}
            ),
        },
    )


def _document() -> st.SearchStrategy[dict[str, Any]]:
    names = st.from_regex(r"[a-z]([-a-z0-9]{0,50}[a-z0-9])?", fullmatch=True)
    return st.fixed_dictionaries(
        {
            "apiVersion": st.just("tflaunch.dev/v1alpha1"),
            "kind": st.just("MultiWorkerJob"),
            "metadata": st.fixed_dictionaries(
                {"name": names, "namespace": st.sampled_from(NAMESPACES)}
            ),
            "spec": _spec(),
        }
    )


def _accepted_objects(documents: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict]]:
    """Render every document; keep (object, document) for what render accepted."""
    accepted: list[tuple[dict[str, Any], dict]] = []
    for document in documents:
        try:
            objects = render.render(job_from_document(document))
        except SpecError:
            continue
        accepted.extend((obj, document) for obj in objects)
    return accepted


def _refusals(control_plane: Any, objects: list[dict[str, Any]]) -> str:
    """Server-side dry-run of every object in one kubectl call; its stderr when any failed.
    The objects go in as `tflaunch render` prints them, for `| kubectl apply -f -`."""
    stream = render.to_yaml(objects)
    run = control_plane.kubectl("apply", "--dry-run=server", "-f", "-", stdin=stream, check=False)
    return "" if run.code == 0 else run.err


@pytest.fixture
def namespaces(control_plane: Any) -> Any:
    for name in NAMESPACES:
        control_plane.kubectl("create", "namespace", name, check=False)
    yield NAMESPACES
    for name in NAMESPACES:
        control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_whatever_render_accepts_the_api_server_accepts(control_plane, namespaces):
    documents: list[dict[str, Any]] = []

    @settings(
        max_examples=1000,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(document=_document())
    def collect(document: dict[str, Any]) -> None:
        document["metadata"]["name"] = _unique(document["metadata"]["name"])
        documents.append(document)

    collect()
    accepted = _accepted_objects(documents)
    rendered = len({id(d) for _, d in accepted})
    print(f"{len(documents)} specs generated, {rendered} rendered, {len(accepted)} objects")
    assert rendered >= 200, "too few specs rendered to prove anything"
    failures = []
    for start in range(0, len(accepted), BATCH):
        batch = accepted[start : start + BATCH]
        if _refusals(control_plane, [obj for obj, _ in batch]):
            failures.extend(_each_refusal(control_plane, batch))
    assert not failures, "render accepted what the API server refused:\n" + "\n\n".join(
        failures[:5]
    )


def _each_refusal(control_plane: Any, batch: list[tuple[dict[str, Any], dict]]) -> list[str]:
    """The refused objects one by one, each with the spec it came from."""
    found = []
    for obj, document in batch:
        error = _refusals(control_plane, [obj])
        if error:
            found.append(f"{error.strip()[:600]}\nspec: {yaml.safe_dump(document['spec'])[:800]}")
    return found


def _unique(name: str) -> str:
    """Keep the generated length (it matters for host names) but make collisions unlikely."""
    suffix = uuid.uuid4().hex[: min(4, max(0, len(name) - 1))]
    return name[: len(name) - len(suffix)] + suffix if suffix else name
