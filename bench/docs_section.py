"""Replace one benchmark's section of docs/performance.md, leaving the others alone."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
TITLE = "# Performance\n\nFigures written by the benchmarks in bench/; rerun them to refresh.\n"


def publish(name: str, heading: str, text: str, *, write: bool) -> None:
    """Print a benchmark's table; with `write` (its --write-docs), also make it the body of
    section `name` of docs/performance.md, under `### heading`."""
    print(text)
    if write:
        write_section(name, f"### {heading}\n\n{text}\n")


def write_section(name: str, body: str) -> None:
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    text = DOC.read_text() if DOC.exists() else TITLE
    block = f"{begin}\n{body.strip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text)
