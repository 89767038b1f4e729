"""Text from the cluster is bounded before it is parsed (issue 27 items 3 and 17): a result
line nested deeper than Python's recursion limit, or longer than any real one, is no result."""

from __future__ import annotations

from collections.abc import Iterator

from launcher.cluster.wire import tail_text
from launcher.core import contract, untrusted
from launcher.core.progress import parse_line
from launcher.operator.objects import parse_result


def test_a_result_nested_100000_deep_is_no_result_and_raises_nothing() -> None:
    deep = '{"a": ' * 100_000 + "1" + "}" * 100_000
    assert parse_result(f"{contract.RESULT_LINE_PREFIX}{deep}\n") is None
    assert parse_line(f"TFLAUNCH_PROGRESS {'[' * 100_000}") is None


def test_the_last_sane_result_line_wins_over_a_hostile_one_after_it() -> None:
    log = (
        f'{contract.RESULT_LINE_PREFIX}{{"test_accuracy": 0.9}}\n'
        f"{contract.RESULT_LINE_PREFIX}{'[' * 5000}\n"
    )
    assert parse_result(log) == {"test_accuracy": 0.9}


def test_nesting_counts_brackets_outside_strings_only() -> None:
    assert untrusted.nesting('{"a": [1, {"b": "[[[{{{"}]}') == 3
    assert untrusted.nesting('"\\"[[["') == 0
    assert untrusted.json_object('{"a": ' + '"x' * untrusted.MAX_LINE_CHARS + '"}') is None


def test_a_log_tail_keeps_the_newest_lines_and_leaves_out_huge_ones() -> None:
    huge = b"x" * 5_000_000
    chunks = [huge[:1_000_000]] * 5 + [b"\nfirst\n", huge + b"\n", b"last"]
    assert tail_text(iter(chunks), keep=1024, max_line=100) == ("first\nlast", False)
    many = [f"line {i}\n".encode() for i in range(1000)]
    assert tail_text(iter(many), keep=20) == ("line 998\nline 999", False)


def test_a_log_tail_stops_reading_after_its_limit() -> None:
    read = []

    def endless() -> Iterator[bytes]:
        while True:
            read.append(1)
            yield b"y" * 1000 + b"\n"

    text, cut = tail_text(endless(), keep=5000, max_line=2000, max_read=100_000)
    assert cut and len(read) == 100 and len(text) < 5000
