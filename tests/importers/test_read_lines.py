"""Reading a JSON Lines file whole or a line at a time: the same lines, and changes caught."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from soong_store.importers import _read
from soong_store.importers._read import Changed, JsonLines, Reading, file_lines

LINES = [b'{"a": 1}\n', b"\n", b'{"b": "x"}\r\n', b"not json\n", b'{"c": [1, 2]}']


@pytest.fixture(params=["whole", "a line at a time"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param != "whole":
        monkeypatch.setattr(_read, "_WHOLE", 0)
    return str(request.param)


def test_both_ways_give_the_same_lines_and_feed_every_byte(tmp_path: Path, way: str) -> None:
    path = tmp_path / "t.jsonl"
    data = b"\xef\xbb\xbf" + b"".join(LINES)
    path.write_bytes(data)
    reading = Reading(path.name, None)
    assert list(file_lines(path, reading=reading)) == LINES
    assert reading.offset == len(data)
    assert reading.digest.digest() == hashlib.sha256(data).digest()


def test_a_last_line_going_on_past_the_end_is_read_whole(tmp_path: Path, way: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 22}\n')
    assert list(file_lines(path, end=12)) == [b'{"a": 1}\n', b'{"b": 22}\n']


def test_a_file_cut_below_its_end_is_changed(tmp_path: Path, way: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a": 1}\n')
    with pytest.raises(Changed, match="cut"):
        list(file_lines(path, end=100))


def test_readings_compare_the_bytes_up_to_the_mark_whatever_the_pieces() -> None:
    first = Reading("t.jsonl", None)
    first.feed(b"abc\n", 4)
    mark = (first.offset, first.digest.digest())
    again = Reading("t.jsonl", mark)
    again.feed(b"abc\ndef\n", 8)  # read whole, past the mark
    assert again.mark is None and again.offset == 8
    other = Reading("t.jsonl", mark)
    with pytest.raises(Changed, match="t.jsonl changed while it was read"):
        other.feed(b"abX\ndef\n", 8)


def test_a_file_rewritten_between_readings_is_changed(tmp_path: Path, way: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n')
    records = JsonLines(path)
    first: list[Any] = list(records)
    assert [r for _, r in first] == [{"a": 1}, {"b": 2}]
    assert list(records) == first  # read again unchanged: the same
    path.write_bytes(b'{"a": 9}\n{"b": 2}\n')
    with pytest.raises(Changed):
        list(records)


def test_a_last_line_without_its_newline_is_unfinished_not_skipped() -> None:
    issues: list[Any] = []
    got = list(_read.iter_jsonl(_read.split_lines(b'{"a": 1}\nnot json\n{"b": '), issues))
    assert got == [(1, {"a": 1})]
    assert [(i.line, i.action) for i in issues] == [(2, "skipped"), (3, "unfinished")]
    whole: list[Any] = []
    assert list(_read.iter_jsonl(_read.split_lines(b'{"a": 1}\n{"b": 2}'), whole)) == [
        (1, {"a": 1}),
        (2, {"b": 2}),
    ]
    assert whole == []  # a whole last line without a newline is read
