"""Set the tflaunch version everywhere it is pinned: `python scripts/set_version.py 0.2.0`.

pyproject.toml's `version` is the one version: the Makefile reads it for the image tags,
and everything else that must name a version (the package's `__version__`, the Dockerfiles'
default build argument, every `tflaunch-trainer:`/`tflaunch-operator:` image reference in the
default job, examples, manifests, docs and golden files, the operator Deployment's and the
CRD's version label and annotation, the Helm chart's appVersion) is checked against it by
tests/infra/test_version_alignment.py, and moved with it by this script.

`python scripts/set_version.py --check` lists the references that disagree (exit 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_V = r"(?P<v>\d+\.\d+\.\d+(?:(?:a|b|rc|\.dev|\.post)\d+)?)"
SOURCE = ("pyproject.toml", re.compile(rf'^version = "{_V}"', re.M))
"""The one version."""
PINNED: tuple[tuple[str | None, re.Pattern[str]], ...] = (
    ("launcher/__init__.py", re.compile(rf'^__version__ = "{_V}"', re.M)),
    ("docker/Dockerfile", re.compile(rf"^ARG VERSION={_V}$", re.M)),
    ("docker/Dockerfile.operator", re.compile(rf"^ARG VERSION={_V}$", re.M)),
    ("charts/tflaunch-operator/Chart.yaml", re.compile(rf'^appVersion: "?{_V}"?$', re.M)),
    # In any tracked text file:
    (None, re.compile(rf"\btflaunch-(?:trainer|operator):{_V}")),
    (None, re.compile(rf'\b(?:app\.kubernetes\.io|tflaunch\.dev)/version: "?{_V}"?')),
)
"""What must carry the same version: (a file, or None for every tracked file, the pattern)."""
SKIP = ("hack/",)
"""The control plane's Go modules pin their own versions."""


@dataclasses.dataclass(frozen=True)
class Reference:
    path: str
    line: int
    version: str
    start: int
    end: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.version}"


def source_version(root: Path = ROOT) -> str:
    match = SOURCE[1].search((root / SOURCE[0]).read_text())
    if match is None:
        raise SystemExit(f'{SOURCE[0]}: no version = "X.Y.Z" line')
    return match["v"]


def tracked_files(root: Path) -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files"], capture_output=True, text=True, check=False
    )
    if listed.returncode == 0 and listed.stdout.strip():
        return sorted(listed.stdout.split("\n")[:-1])
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def references(root: Path = ROOT) -> list[Reference]:
    """Every pinned version in the tree (the source itself not included)."""
    found: list[Reference] = []
    everywhere = [p for p in tracked_files(root) if not p.startswith(SKIP)]
    for only, pattern in PINNED:
        for path in [only] if only else everywhere:
            file = root / path
            try:
                text = file.read_text(encoding="utf-8")
            except (FileNotFoundError, UnicodeDecodeError, IsADirectoryError):
                continue
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(Reference(path, line, match["v"], *match.span("v")))
    return found


def set_version(new: str, root: Path = ROOT) -> int:
    """Write `new` into pyproject.toml and every reference; returns how many changed."""
    if not re.fullmatch(_V, new):
        raise SystemExit(f"{new!r} is not a version like 1.2.3 (or 1.2.3rc1)")
    refs = references(root)
    source = root / SOURCE[0]
    text = source.read_text()
    match = SOURCE[1].search(text)
    assert match is not None
    source.write_text(text[: match.start("v")] + new + text[match.end("v") :])
    by_path: dict[str, list[Reference]] = {}
    for ref in refs:
        by_path.setdefault(ref.path, []).append(ref)
    for path, in_file in by_path.items():
        text = (root / path).read_text(encoding="utf-8")
        for ref in sorted(in_file, key=lambda r: r.start, reverse=True):
            text = text[: ref.start] + new + text[ref.end :]
        (root / path).write_text(text, encoding="utf-8")
    return len(refs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", nargs="?", help="the new version, e.g. 0.2.0")
    parser.add_argument("--check", action="store_true", help="only list disagreeing references")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.check or not args.version:
        version = source_version(args.root)
        wrong = [r for r in references(args.root) if r.version != version]
        for ref in wrong:
            print(f"{ref} (pyproject.toml says {version})")
        sys.exit(1 if wrong else 0)
    count = set_version(args.version, args.root)
    print(f"version {args.version}: pyproject.toml and {count} references")


if __name__ == "__main__":
    main()
