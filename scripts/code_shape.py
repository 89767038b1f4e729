"""The shape of a Python package: modules, lines, the biggest module and the biggest class.

Usage: python scripts/code_shape.py [PACKAGE_DIR ...]   (default: launcher)

Lines are physical lines (`wc -l`); a class's lines run from its `class` line (decorators
included) to its last line, as `ast` reports them. Rerun it on an older commit with
`git worktree add /tmp/old <commit> && python scripts/code_shape.py /tmp/old/launcher`.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def shape(root: Path) -> dict[str, object]:
    modules = sorted(root.rglob("*.py"))
    lines = {m: len(m.read_text().splitlines()) for m in modules}
    classes: list[tuple[int, str]] = []
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ClassDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                size = (node.end_lineno or node.lineno) - first + 1
                classes.append((size, f"{module.relative_to(root.parent)}:{node.name}"))
    biggest = max(lines, key=lambda m: lines[m])
    big_class = max(classes)
    return {
        "modules": len(modules),
        "packages": len({m.parent for m in modules}),
        "lines": sum(lines.values()),
        "biggest module": f"{lines[biggest]} ({biggest.relative_to(root.parent)})",
        "modules over 500 lines": sum(1 for n in lines.values() if n > 500),
        "biggest class": f"{big_class[0]} ({big_class[1]})",
        "classes over 250 lines": sum(1 for n, _ in classes if n > 250),
    }


def main(argv: list[str]) -> None:
    for root in [Path(a) for a in argv] or [Path("launcher")]:
        print(f"{root}:")
        for key, value in shape(root).items():
            print(f"  {key:24} {value}")


if __name__ == "__main__":
    main(sys.argv[1:])
