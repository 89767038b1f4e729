"""`make bench`: every benchmark, short by default, long with FULL=1 (read through `make -n`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra._infra import REPO
from tests.infra.test_infra_makefile import MakeDryRun, commands

WRITES_ITS_OWN_SECTION = {"bench_render.py", "bench_cluster.py"}
"""These two always rewrite their section; the others only with --write-docs."""


def bench_runs(output: str) -> dict[str, tuple[str, list[str]]]:
    """bench script -> (BENCH=..., its arguments), for every python bench/*.py command."""
    runs = {}
    for words in commands(output):
        scripts = [w for w in words if w.startswith("bench/") and w.endswith(".py")]
        if scripts:
            env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
            runs[Path(scripts[0]).name] = (env["BENCH"], words[words.index(scripts[0]) + 1 :])
    return runs


def test_bench_runs_every_benchmark_short_and_each_writes_its_section(
    make_dry_run: MakeDryRun,
) -> None:
    runs = bench_runs(make_dry_run("bench"))
    on_disk = {p.name for p in (REPO / "bench").glob("bench_*.py")}
    assert set(runs) == on_disk
    for script, (mode, args) in runs.items():
        assert mode == "short"
        assert script in WRITES_ITS_OWN_SECTION or "--write-docs" in args, script


@pytest.mark.parametrize("value", ["1", "yes"])
def test_full_selects_the_long_versions(make_dry_run: MakeDryRun, value: str) -> None:
    runs = bench_runs(make_dry_run("bench", f"FULL={value}"))
    assert {mode for mode, _ in runs.values()} == {"full"}
    assert "--repeats" in runs["bench_local.py"][1]


def test_the_bench_hooks_patch_only_what_the_trainer_defines() -> None:
    """bench/hooks/sitecustomize.py wraps trainer functions by name at run time; a rename
    in the trainer would break every benchmark that times phases, and only when run."""
    import ast
    import re

    hook = (REPO / "bench" / "hooks" / "sitecustomize.py").read_text()
    used: dict[str, set[str]] = {}
    for module, name in re.findall(r"\b(train|preflight|data)\.([A-Za-z_]\w*)", hook):
        used.setdefault(module, set()).add(name)
    assert used.get("train"), "the hook no longer patches trainer.train: update this test"
    for module, names in used.items():
        tree = ast.parse((REPO / "trainer" / f"{module}.py").read_text())
        defined = {
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
        } | {
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        assert names <= defined, f"trainer/{module}.py lacks {sorted(names - defined)}"
