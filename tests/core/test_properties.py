"""Property-based: random specs and CLI flags either render valid manifests or fail with
exit 2 and one line on stderr — never a traceback."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.cli.main import run
from launcher.core import exit_policy
from launcher.core.errors import SpecError
from launcher.core.load import job_from_document
from launcher.core.yamldoc import default_document

kubernetes_validate = pytest.importorskip("kubernetes_validate")

small_ints = st.integers(min_value=-3, max_value=70000)
names = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,70}", fullmatch=True),
    st.text(max_size=12),
    st.sampled_from(["yes", "null", "a--b", "x" * 60]),
)
scalars = st.one_of(
    st.none(), st.booleans(), small_ints, st.floats(allow_nan=False), st.text(max_size=10)
)


def _flag_lists() -> st.SearchStrategy[list[str]]:
    flag = st.one_of(
        st.tuples(st.just("--workers"), st.integers(-2, 40).map(str)),
        st.tuples(st.just("--gpus"), st.integers(-1, 8).map(str)),
        st.tuples(st.just("--global-batch-size"), st.integers(-1, 2048).map(str)),
        st.tuples(st.just("--epochs"), st.integers(-1, 5).map(str)),
        st.tuples(st.just("--name"), names),
        st.tuples(st.just("--namespace"), names),
        st.tuples(st.just("--layout"), st.sampled_from(["indexed", "per-worker", "other"])),
        st.tuples(st.just("--image"), st.sampled_from(["r.io/t:1", "", "a b", "x@sha256:00"])),
        st.tuples(
            st.just("--set"),
            st.builds(
                lambda k, v: f"{k}={v}",
                st.sampled_from(
                    [
                        "spec.port",
                        "spec.trainer.stepsPerEpoch",
                        "spec.suspend",
                        "spec.trainer.saveFreq",
                        "spec.backoffLimit",
                        "spec.env",
                        "spec.resources.limits.cpu",
                        "spec.clusterDomain",
                        "spec.typo",
                    ]
                ),
                st.one_of(
                    small_ints.map(str),
                    st.sampled_from(["true", "epoch", "{A: b}", "1Gi", "[1]", "ok.local", "'x'"]),
                ),
            ),
        ),
        st.tuples(st.just("--set"), st.text(max_size=15)),
    )
    return st.lists(flag, max_size=5).map(lambda pairs: [x for pair in pairs for x in pair])


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = run(argv)
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flags=_flag_lists(), output=st.sampled_from(["yaml", "json"]))
def test_random_flags_render_valid_manifests_or_fail_in_one_line(flags, output):
    code, out, err = _run(["render", "-o", output, *flags])
    assert "Traceback" not in err
    if code == 0:
        objects = json.loads(out)["items"] if output == "json" else list(yaml.safe_load_all(out))
        assert objects
        for obj in objects:
            exit_policy.drop_container_restart_rules(obj)  # 1.35's: as submit sends it to 1.29
            kubernetes_validate.validate(obj, "1.29", strict=True)
    else:
        assert code == 2, err
        assert len(err.strip().splitlines()) == 1, err
        assert not out


def _mutations() -> st.SearchStrategy[list[tuple[list[str], object]]]:
    paths = st.lists(
        st.sampled_from(
            [
                "spec",
                "metadata",
                "trainer",
                "workers",
                "resources",
                "limits",
                "cpu",
                "image",
                "env",
                "tolerations",
                "name",
                "checkpoint",
                "claimName",
                "port",
                "bogus",
            ]
        ),
        min_size=1,
        max_size=4,
    )
    values = st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=5,
    )
    return st.lists(st.tuples(paths, values), max_size=4)


@settings(max_examples=150, deadline=None)
@given(mutations=_mutations())
def test_any_document_either_loads_or_raises_a_spec_error(mutations):
    document = default_document()
    for path, value in mutations:
        node = document
        for key in path[:-1]:
            child = node.get(key) if isinstance(node, dict) else None
            if not isinstance(child, dict):
                break
            node = child
        else:
            if isinstance(node, dict):
                node[path[-1]] = value
    try:
        job_from_document(document)
    except SpecError as error:
        assert str(error) and "\n" not in str(error)
