"""`spec.script`: a program of the user's own, carried in the spec and mounted into every worker.

Users iterate on a training program without building an image: the CLI reads it
(`--script train.py`, `--script DIR`, or `script: ...` in a spec file, relative to that file)
into the spec as `{name, source, files}`, which is also what a MultiWorkerJob holds, so the
operator needs no access to the user's disk. Render puts every file in a ConfigMap owned by
the job and mounts it read-only with the files' layout; `tflaunch local` writes the same
files to the run's workdir.

Which files: for a directory, all of its files (not hidden ones, not `__pycache__`), the entry
being DIR/main.py; for a file, that file and the modules beside it that it imports (`import
mnist_setup` -> mnist_setup.py, or the package directory mnist_setup/), transitively, as
TensorFlow's multi-worker tutorials lay themselves out (main.py + mnist_setup.py). Carrying
only what the file imports keeps `--script train.py` in a crowded directory what it was.

What the program's code shows before it runs (a strategy of one machine, a TF_CONFIG of its
own, ...) is `launcher.core.script_lint`'s.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from launcher.api.spec import SCRIPT_MOUNT_PATH
from launcher.core.errors import SpecError

MOUNT_PATH = SCRIPT_MOUNT_PATH
"""Where every worker finds the program (a read-only ConfigMap volume)."""
MAX_BYTES = 1024 * 1024
"""A ConfigMap holds at most 1 MiB of text (all files together); larger code goes into an image
(docker/Dockerfile.custom-example)."""
NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$")
"""One plain file or directory name (not hidden); also a valid ConfigMap key."""
ENTRY_NAMES = ("main.py", "__main__.py")
"""The entry file of `--script DIR`, the first that exists."""
SKIPPED_DIRS = frozenset({"__pycache__"})
FIELD = "spec.script"


class Program(Protocol):
    """What `launcher.api.spec.Script` holds (a Protocol: any object with these will do)."""

    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def files(self) -> dict[str, str]: ...


def expand_path(document: dict[str, Any], base: Path) -> None:
    """Replace a `spec.script` path (relative to `base`) by `{name, source, files}` in place.

    Raises:
        SpecError: a file cannot be read, is not UTF-8 text, or the whole is too large.
    """
    spec = document.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("script"), str):
        return
    path = base / Path(spec["script"]).expanduser()
    if path.is_dir():
        entry = next((path / n for n in ENTRY_NAMES if (path / n).is_file()), None)
        if entry is None:
            raise SpecError(
                FIELD,
                f"{path} is a directory without main.py; name the entry file instead "
                f"(--script {path}/train.py)",
            )
        others = sorted(p for p in _all_files(path) if p != entry.name)
    else:
        entry = path
        source = _read(entry, entry.name)
        others = sorted(_imported_neighbours(entry.parent, source, entry.name))
    directory = entry.parent
    files = {rel: _read(directory / rel, rel) for rel in others}
    spec["script"] = {"name": entry.name, "source": _read(entry, entry.name), "files": files}
    check_size({entry.name: spec["script"]["source"], **files})


def _read(path: Path, rel: str) -> str:
    try:
        with path.open("rb") as file:  # /dev/zero, a FIFO: read no more than can be kept
            data = file.read(MAX_BYTES + 1)
    except OSError as e:
        raise SpecError(FIELD, f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise SpecError(
            FIELD,
            f"{path.name} is larger than {MAX_BYTES} bytes (1 MiB), what a ConfigMap holds; "
            "put larger code into an image built FROM the trainer image "
            "(docker/Dockerfile.custom-example) and name it in spec.command",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(
            FIELD,
            f"{path} is not UTF-8 text; a ConfigMap carries the program's source files only: "
            "move data out of the program's directory (or bake it into an image)",
        ) from None


def _all_files(directory: Path) -> Iterator[str]:
    """Every file under `directory` as a relative POSIX path, hidden entries and
    __pycache__ skipped."""
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if any(part.startswith(".") or part in SKIPPED_DIRS for part in rel.parts):
            continue
        if path.is_file():
            yield rel.as_posix()


def _imported_neighbours(directory: Path, source: str, name: str) -> set[str]:
    """The files of `directory` that `source` imports, transitively (modules as NAME.py,
    packages as every file under NAME/)."""
    found: set[str] = set()
    todo = [(name, source)]
    while todo:
        rel, text = todo.pop()
        for module in _top_level_imports(text, rel):
            if (directory / f"{module}.py").is_file():
                new = {f"{module}.py"}
            elif (directory / module).is_dir():
                new = {f"{module}/{p}" for p in _all_files(directory / module)}
            else:
                continue
            for path in sorted(new - found - {name}):
                found.add(path)
                if path.endswith(".py"):
                    todo.append((path, _read(directory / path, path)))
    return found


def _top_level_imports(source: str, filename: str) -> set[str]:
    """The first name of every absolute import in `source` (none if it does not parse)."""
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return set()  # `check_compiles` says where, with the rest of the spec's checks
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def all_files(program: Program) -> dict[str, str]:
    """Every file of the program by relative path, the entry file first."""
    return {program.name: program.source, **program.files}


def check_size(files: Mapping[str, str]) -> None:
    """The files' text together fits a ConfigMap (Kubernetes counts the values, not keys)."""
    size = sum(len(text.encode()) for text in files.values())
    if size > MAX_BYTES:
        what = (
            f"the program's {len(files)} files are" if len(files) > 1 else f"{next(iter(files))} is"
        )
        raise SpecError(
            FIELD,
            f"{what} {size} bytes, more than the {MAX_BYTES} (1 MiB) a ConfigMap holds; "
            "put larger code into an image built FROM the trainer image "
            "(docker/Dockerfile.custom-example) and name it in spec.command",
        )


def check_name(name: str) -> None:
    if not NAME.fullmatch(name) or len(name) > 253:
        raise SpecError(
            f"{FIELD}.name",
            f"{name!r} is not a plain file name (letters, digits, '.', '_', '-'; no '/'): "
            "rename it; the program reaches the pods as a ConfigMap, whose keys allow only these",
        )


def check_paths(program: Program) -> None:
    """Each of spec.script.files is a relative path of plain names, not the entry file."""
    for rel in program.files:
        parts = rel.split("/")
        if rel == program.name or not all(NAME.match(part) for part in parts) or len(rel) > 253:
            raise SpecError(
                f"{FIELD}.files",
                f"{rel!r} is not a relative path of plain names (letters, digits, '.', '_', "
                "'-', separated by '/'; no '..', not hidden) other than spec.script.name: "
                "rename it, or leave it out of the directory",
            )


def check_compiles(program: Program) -> None:
    """Every Python file of the program compiles: a syntax error is found before any worker
    starts (in milliseconds, not after TensorFlow has loaded on every worker).

    Raises:
        SpecError: naming the file and line.
    """
    for rel, text in all_files(program).items():
        if not rel.endswith(".py"):
            continue
        try:
            compile(text, rel, "exec", dont_inherit=True)
        except SyntaxError as e:
            where = f"{rel}:{e.lineno}" if e.lineno else rel
            raise SpecError(FIELD, f"{where}: {e.msg}; fix the program") from None
        except ValueError as e:  # null bytes
            raise SpecError(FIELD, f"{rel}: {e}") from None


def config_map_layout(program: Program) -> tuple[dict[str, str], list[dict[str, str]]]:
    """(data, items) of the program's ConfigMap and volume: one key per file, and the path
    each key is mounted at (`items`, which keeps the layout; none when every file is at the
    top level, where a key is mounted at its own name).

    A ConfigMap key cannot contain '/' (nor be '.' or start with '..'): a top-level file's
    key is its name; a nested file's is `.<n>.<its name>`, unique by n and never a top-level
    name (those never start with '.').
    """
    data: dict[str, str] = {}
    items: list[dict[str, str]] = []
    for index, (rel, text) in enumerate(sorted(all_files(program).items())):
        key = rel if "/" not in rel else f".{index}.{PurePosixPath(rel).name}"
        data[key] = text
        items.append({"key": key, "path": rel})
    if all(item["key"] == item["path"] for item in items):
        return data, []  # every key is mounted at its own name: no items needed
    return data, items


def python_trees(program: Program) -> Iterator[tuple[str, ast.Module]]:
    """Each .py file of the program that parses, by relative path (`check_compiles` reports
    the ones that do not)."""
    for rel, text in all_files(program).items():
        if not rel.endswith(".py"):
            continue
        try:
            yield rel, ast.parse(text, rel)
        except (SyntaxError, ValueError):
            continue
