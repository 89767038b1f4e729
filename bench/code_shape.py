"""The shape of the code, measured the same way every time (issue 24's before/after table).

    python bench/code_shape.py            # the table, for launcher/ and trainer/

What it counts, all from the source text (ast), no import of the code:

- modules and lines (physical lines of the .py files);
- the biggest module (lines) and the biggest class (lines from `class` to its last line);
- import cycles among launcher's modules, type-only imports (under `if TYPE_CHECKING:`)
  included: the strongly connected components of the import graph with more than one module;
- places that read a pod's terminated state: functions (and templates) that index or `.get`
  the key "terminated";
- places that decide a restart: functions that compare a restart count with a backoff limit,
  plus templates that write podFailurePolicy actions (FailJob/Ignore) by hand;
- places that decide "Job complete": functions (or module constants) that look for the
  "Complete" condition (a "Complete" only returned as a label does not count);
- class names defined in more than one package;
- `(... or {})` dict walks in launcher/.
"""

from __future__ import annotations

import ast
import collections
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("launcher", "trainer")


def modules(package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The launcher modules `name` imports (TYPE_CHECKING blocks included)."""
    out = set()
    package = name if name in known and _is_package(name) else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    out.add(full)
                elif base in known:
                    out.add(base)
    out.discard(name)
    return out


def _is_package(name: str) -> bool:
    return (ROOT / Path(*name.split(".")) / "__init__.py").exists()


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _innermost(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Functions that contain no other function (a nested helper is its own place)."""
    return [
        f
        for f in functions(tree)
        if not any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in ast.walk(f)
                   if n is not f)
    ]  # fmt: skip


def _strings(node: ast.AST) -> set[str]:
    return {
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def _names(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def _compares_restarts_with_limit(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Compare):
            names = {x.lower() for x in _names(n)}
            if any("restart" in x for x in names) and any("limit" in x for x in names):
                return True
    return False


def _complete_readers(tree: ast.Module) -> list[str]:
    """Where the Job condition "Complete" is looked for: the innermost function (or the
    module-level name) holding the string, except where it is only returned as a label."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and node.value == "Complete"):
            continue
        where, up, returned = None, parents.get(node), False
        label = True  # so far only inside tuples: a value being built, not a lookup
        while up is not None:
            returned = returned or (label and isinstance(up, ast.Return))
            label = label and isinstance(up, ast.Tuple | ast.List)
            if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef) and where is None:
                where = up.name
            if isinstance(up, ast.Assign) and where is None:
                where = "/".join(t.id for t in up.targets if isinstance(t, ast.Name)) or None
            up = parents.get(up)
        if not returned and where and where not in found:
            found.append(where)
    return found


def measure() -> dict[str, object]:
    mods = {}
    for package in PACKAGES:
        mods.update(modules(package))
    launcher = {k: v for k, v in mods.items() if k.split(".")[0] == "launcher"}
    trees = {k: ast.parse(v.read_text()) for k, v in mods.items()}
    lines = {k: len(v.read_text().splitlines()) for k, v in mods.items()}

    biggest_class = ("", 0)
    class_packages: dict[str, set[str]] = collections.defaultdict(set)
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > biggest_class[1]:
                    biggest_class = (f"{name}.{node.name}", size)
                package = ".".join(name.split(".")[:2])
                class_packages[node.name].add(package)
    duplicates = sorted(
        f"{cls} ({', '.join(sorted(p))})" for cls, p in class_packages.items() if len(p) > 1
    )

    known = set(launcher)
    graph = {name: imports(name, trees[name], known) for name in launcher}
    found_cycles = cycles(graph)

    terminated, restart, complete = [], [], []
    for name in launcher:
        for f in _innermost(trees[name]):
            strings = _strings(f)
            if "terminated" in strings:
                terminated.append(f"{name}.{f.name}")
            if _compares_restarts_with_limit(f):
                restart.append(f"{name}.{f.name}")
        complete.extend(f"{name}.{where}" for where in _complete_readers(trees[name]))
    for template in sorted((ROOT / "launcher").rglob("*.j2")):
        text = template.read_text()
        rel = str(template.relative_to(ROOT))
        if "terminated" in text:
            terminated.append(rel)
        if re.search(r"action:\s*(FailJob|Ignore)", text):
            restart.append(rel)

    or_walks = sum(len(re.findall(r"\bor \{\}\)", path.read_text())) for path in launcher.values())
    biggest_module = max(lines.items(), key=lambda kv: kv[1])
    return {
        "modules (launcher + trainer)": len(mods),
        "modules (launcher)": len(launcher),
        "lines (launcher + trainer)": sum(lines.values()),
        "lines (launcher)": sum(lines[k] for k in launcher),
        "biggest module": f"{biggest_module[0]} ({biggest_module[1]} lines)",
        "biggest class": f"{biggest_class[0]} ({biggest_class[1]} lines)",
        "import cycles (type-only included)": found_cycles,
        "places reading a pod's terminated state": terminated,
        "places deciding a restart": restart,
        "places reading 'Job complete'": complete,
        "class names in more than one package": duplicates,
        "(... or {}) dict walks in launcher": or_walks,
    }


def main() -> None:
    for key, value in measure().items():
        if isinstance(value, list):
            print(f"{key}: {len(value)}")
            for item in value:
                print(f"    {' -> '.join(item) if isinstance(item, list) else item}")
        else:
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
