"""Reading a spec's YAML (a file, stdin, a --set value) so that what a user wrote is what renders.

PyYAML's SafeLoader turns `3.10` into the float 3.1, `0x1F` into 31 and `2024-01-31` into a
date, so a string field (an env value, a label) would render text the user never wrote. This
loader keeps the source text of every number (`SourceInt`, `SourceFloat`: plain numbers that
remember how they were written), leaves dates as strings, and `typed` uses the text where the
field is a string. It also refuses what PyYAML lets through silently: a key written twice
(the last one wins) and aliases that expand into a huge document (an alias bomb makes
`json.dumps` run for minutes and gigabytes).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from launcher.core.errors import SpecError

MAX_NODES = 20_000
"""How many YAML nodes a spec may hold once aliases are expanded; a real spec has hundreds."""


class SourceInt(int):
    """An int that remembers the text it was written as."""

    source: str


class SourceFloat(float):
    """A float that remembers the text it was written as."""

    source: str


def _represent_source(tag: str) -> Any:
    def represent(dumper: yaml.SafeDumper, value: SourceInt | SourceFloat) -> yaml.ScalarNode:
        return dumper.represent_scalar(tag, value.source)

    return represent


class Dumper(yaml.SafeDumper):
    """SafeDumper that writes a document read here back with its numbers as they were written
    (e.g. a spec turned into the MultiWorkerJob that `kubectl apply` gets): 3.10, not 3.1.
    A subclass, so that PyYAML's own SafeDumper stays as it is for everyone else."""


Dumper.add_representer(SourceInt, _represent_source("tag:yaml.org,2002:int"))
Dumper.add_representer(SourceFloat, _represent_source("tag:yaml.org,2002:float"))


def dump(document: Any, **options: Any) -> str:
    """`document` as YAML (`Dumper`), keys in their order."""
    return str(yaml.dump(document, Dumper=Dumper, sort_keys=False, **options))


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps numbers' text, has no timestamps and refuses duplicate keys."""


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> SourceInt:
    value = SourceInt(yaml.SafeLoader.construct_yaml_int(loader, node))
    value.source = node.value
    return value


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> SourceFloat:
    value = SourceFloat(yaml.SafeLoader.construct_yaml_float(loader, node))
    value.source = node.value
    return value


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[str] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE:
            continue
        key = key_node.value
        if key in seen:
            line = key_node.start_mark.line + 1
            raise SpecError("", f"key {key!r} is written twice (line {line}); keep one")
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node)


_MERGE = "tag:yaml.org,2002:merge"


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_all(text: str) -> list[Any]:
    """Every document in `text`; raises yaml.YAMLError on bad syntax, SpecError on a bomb."""
    loader = _Loader(text)
    try:
        documents = []
        while loader.check_node():
            node = loader.get_node()
            assert node is not None  # check_node() said there is one
            _check_size(node)
            documents.append(loader.construct_document(node))
        return documents
    except RecursionError:  # PyYAML composes nested nodes recursively
        raise _too_deep() from None
    finally:
        loader.dispose()


MAX_DEPTH = 100
"""How deeply a spec may nest: a Kubernetes object needs about 15 levels; far more only
exhausts the stack of whatever walks it next (the YAML composer, the typing, the render)."""


def _too_deep() -> SpecError:
    return SpecError(
        "", f"the document nests more than {MAX_DEPTH} levels deep; no job spec needs that"
    )


def load_value(text: str) -> Any:
    """One value, as `--set` reads it (numbers keep their text, so string fields get it)."""
    documents = load_all(text)
    return documents[0] if documents else None


def _check_size(root: yaml.Node) -> None:
    """Count the nodes of the document as if every alias were expanded, each node once."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node, depth: int = 1) -> int:
        if depth > MAX_DEPTH:
            raise _too_deep()
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = 1  # a cycle counts once; constructing it is bounded anyway
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        sizes[id(node)] = min(total, MAX_NODES + 1)
        return sizes[id(node)]

    if size(root) > MAX_NODES:
        raise SpecError(
            "",
            f"the document expands to more than {MAX_NODES} YAML nodes once its aliases "
            "(*name) are expanded; write the values out instead of nesting aliases",
        )


# --- Reading a spec file or a --set value ---------------------------------------------------


def default_document() -> dict[str, Any]:
    """The embedded default job (the same as examples/mnist.yaml)."""
    text = resources.files("launcher.core").joinpath("default_job.yaml").read_text()
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    return document


def read_document(path: str | None) -> dict[str, Any]:
    """Read a spec file (`-` for stdin, None for the embedded default) into plain data."""
    if path is None:
        return default_document()
    where = "stdin" if path == "-" else path
    text = _decode(_read_bytes(path, where), where)
    try:
        documents = [d for d in load_all(text) if d is not None]
    except SpecError as error:
        raise SpecError(error.field, f"{where}: {error.message}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise SpecError("", f"{where}: malformed YAML{at}: {problem}") from None
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise SpecError(
            "",
            f"{where}: expected one YAML mapping (a MultiWorkerJob), found {len(documents)}"
            " documents"
            if len(documents) != 1
            else f"{where}: expected a YAML mapping",
        )
    return documents[0]


MAX_SPEC_BYTES = 4 * 1024 * 1024
"""The largest spec file read: a script inside one is at most 1 MiB."""


def _read_bytes(path: str, where: str) -> bytes:
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_SPEC_BYTES + 1)
        else:
            with Path(path).open("rb") as file:  # /dev/zero, a FIFO: never read it all
                data = file.read(MAX_SPEC_BYTES + 1)
    except OSError as error:
        raise SpecError(
            "SPEC",
            f"cannot read {where}: {error.strerror or error}; pass an existing spec file "
            "(e.g. examples/mnist.yaml), or none for the embedded default",
        ) from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(
            "SPEC",
            f"{where} is larger than {MAX_SPEC_BYTES} bytes; a job spec is a few KiB (a "
            "script in it at most 1 MiB)",
        )
    return data


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpecError(
            "SPEC",
            f"{where} is not UTF-8 text: byte 0x{data[error.start]:02x} at offset {error.start}"
            " cannot be decoded; save the file as UTF-8",
        ) from None


def parse_assignment(text: str) -> tuple[str, Any]:
    """`spec.trainer.epochs=5` -> ("spec.trainer.epochs", 5); the value is read as YAML, and
    a number keeps its text for a string field (`spec.env.V=1.10` sets "1.10")."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise SpecError("--set", f"expected KEY=VALUE (e.g. spec.workers=4), got {text!r}")
    try:
        value = load_value(raw) if raw.strip() else ""
    except (yaml.YAMLError, SpecError):
        value = raw
    return key.strip(), value


def apply_overrides(document: dict[str, Any], overrides: Sequence[tuple[str, Any]]) -> None:
    """Set dotted paths in the raw document, so overrides go through the same validation."""
    for dotted, value in overrides:
        parts = dotted.split(".")
        node: Any = document
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise SpecError(dotted, f"cannot set it: {where} is not a mapping")
            node = child
        node[parts[-1]] = value
