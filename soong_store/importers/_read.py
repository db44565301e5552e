"""Reading source files: JSON Lines with recovery of damaged lines, JSON documents, timestamps.

Every value is parsed by orjson (NaN and Infinity refused, integers within 64 bits), so what a
parser gets can always be stored. A JSON Lines file is read line by line and no line is fatal:

- a line holding several JSON objects one after the other (a writer that lost a newline) is
  split into them (``recovered``), when the whole line is exactly those objects;
- a last line without its newline that is not whole JSON (a writer still writing it) is
  ``unfinished``: nothing of it is taken, and a later reading takes it once it is whole;
- anything else that is not one JSON object (truncated JSON, a string, a number, a list, bytes
  that are not UTF-8, values nested deeper than orjson's 1,024 levels) is ``skipped``; all
  are reported as :class:`LineIssue` with the line.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from soong_store.importers._model import LineIssue

_DECODER = json.JSONDecoder()
_BOM = b"\xef\xbb\xbf"


def read_jsonl(data: bytes) -> tuple[list[tuple[int, dict[str, Any]]], list[LineIssue]]:
    """The JSON objects of a JSON Lines file with their 1-based line numbers, and the issues."""
    issues: list[LineIssue] = []
    return list(iter_jsonl(split_lines(data), issues)), issues


def iter_jsonl(
    lines: Iterator[bytes], issues: list[LineIssue] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of ``lines`` with their 1-based line numbers, one at a time.

    A line's bytes are let go as soon as it is parsed, so a long line is held twice at most
    (its bytes and its value) while it is read. The problems go into ``issues`` (none kept
    without it: a second reading of a file has reported them already).
    """
    found: list[LineIssue] = [] if issues is None else issues
    lineno = 0
    for raw in lines:  # not enumerate(): its reused tuple would keep the last line alive
        lineno += 1
        if not raw or raw.isspace():
            continue
        held: list[bytes | str] = [raw]
        del raw
        try:
            value = load_value(held)  # JSON's own whitespace around the value is allowed
        except orjson.JSONDecodeError as exc:
            line = held.pop()
            line = line.encode() if isinstance(line, str) else line
            try:
                value = orjson.loads(line.strip())  # other spaces ``strip`` takes (form feeds)
            except orjson.JSONDecodeError:
                pieces = _joined_objects(line.strip())
                if pieces is None and not line.endswith(b"\n"):  # the last line, being written
                    found.append(LineIssue(lineno, "unfinished", _UNFINISHED))
                    continue
                if pieces is None:
                    found.append(LineIssue(lineno, "skipped", f"not JSON ({_short(exc)})"))
                    continue
                found.append(
                    LineIssue(lineno, "recovered", f"{len(pieces)} JSON objects joined on one line")
                )
                yield from ((lineno, piece) for piece in pieces)
                continue
            del line
        if isinstance(value, dict):
            yield lineno, value
        else:
            kind = type(value).__name__ if value is not None else "null"
            found.append(LineIssue(lineno, "skipped", f"a JSON {kind}, not an object"))
        del value


_UNFINISHED = "no newline yet and not whole JSON (still being written?): read once it is whole"

_LONG = 2**22
"""From this length on, :func:`load_value` parses a line holding two copies of it, not three."""
_SURROGATE = re.compile(r"\\u[dD][89abAB]|\\u[dD][c-fC-F]")


def load_value(held: list[bytes | str]) -> Any:
    """``orjson.loads`` of ``held[0]``, which it takes (``held`` emptied) once it has parsed it.

    orjson copies its input before it builds the value: a line of 100 MB costs 300 MB while it
    is parsed. A long line is therefore decoded (its bytes let go), then parsed by the standard
    library, which holds the text and the value only; the value is kept when it is one orjson
    would give (no NaN or Infinity, integers within 64 bits, no lone surrogate), else orjson
    gives its own verdict.
    """
    data = held[0]
    if len(data) < _LONG:
        value = orjson.loads(data)
        held.clear()
        return value
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        return orjson.loads(data)  # raises orjson's own error
    held[0] = text
    del data
    try:
        value = _STRICT.decode(text)
    except (ValueError, RecursionError):
        value = None
    else:
        if _SURROGATE.search(text) is None:
            held.clear()
            return value
    del value
    value = orjson.loads(text)
    held.clear()
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _int64(text: str) -> int:
    value = int(text)
    if not -(2**63) <= value < 2**64:
        raise ValueError("integer out of range")
    return value


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError("number out of range")
    return value


_STRICT = json.JSONDecoder(parse_constant=_refuse_constant, parse_int=_int64, parse_float=_finite)


class JsonLines:
    """A JSON Lines file's records, read from its bytes or the file as many times as asked.

    A parser that needs the whole file's links before it reads the entries reads it twice
    rather than holding it. ``issues`` are those of the last reading that went to the end.

    Every reading of the file reads the bytes the readings before it read, and a reading after
    one that went to the end stops where that one did: a file that grows meanwhile is read as
    it was, and one whose bytes changed under the readings (cut, or rewritten in place) fails
    with :class:`Changed` rather than give the parser a mix of two versions.
    """

    def __init__(self, path: Path, data: bytes | None = None) -> None:
        self.path, self.data = path, data
        self.issues: list[LineIssue] = []
        self._end: int | None = None
        """Where the first reading that went to the end stopped."""
        self._mark: tuple[int, bytes] | None = None
        """The furthest a reading went, and the hash of the bytes up to there."""

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        found: list[LineIssue] = []
        if self.data is not None:
            yield from iter_jsonl(split_lines(self.data), found)
            self.issues = found
            return
        reading = Reading(self.path.name, self._mark)
        with self.path.open("rb") as file:
            try:
                yield from iter_jsonl(file_lines(file, end=self._end, reading=reading), found)
                reading.finish()
                self._end = self._end if self._end is not None else file.tell()
            finally:  # a reading stopped early (a parser's ``any``) marks how far it went too
                if not reading.broken and reading.offset > (self._mark or (0, b""))[0]:
                    self._mark = (reading.offset, reading.digest.digest())
        self.issues = found


class Changed(ValueError):
    """A file's bytes changed while it was being read (it was cut or rewritten in place)."""


class Reading:
    """One reading of a file: the hash of what it read, checked against an earlier reading's."""

    def __init__(self, name: str, mark: tuple[int, bytes] | None) -> None:
        self.name, self.mark = name, mark
        self.digest = hashlib.sha256()
        self.offset = 0
        self.broken = False

    def feed(self, data: bytes, offset: int) -> None:
        """Take the bytes read up to ``offset``; :class:`Changed` if they are not the mark's.

        ``data`` may go past the mark (a whole file read at once): its bytes up to the mark are
        what is compared.
        """
        mark = self.mark
        if mark is not None and offset >= mark[0]:
            probe = self.digest.copy()
            probe.update(data[: len(data) - (offset - mark[0])])
            if probe.digest() != mark[1]:
                self.changed()
            self.mark = None
        self.digest.update(data)
        self.offset = offset

    def finish(self) -> None:
        """The reading went to the file's end: :class:`Changed` if an earlier one went further."""
        if self.mark is not None:
            self.changed()

    def changed(self) -> None:
        """Give up on this reading: the file is not the one the earlier readings read."""
        self.broken = True
        raise Changed(f"{self.name} changed while it was read; import it again")


def file_lines(
    source: Path | BinaryIO, *, end: int | None = None, reading: Reading | None = None
) -> Iterator[bytes]:
    """The lines of a file (a leading BOM dropped), each read once whole.

    ``source`` is a path, or an open file read from where it stands, up to ``end`` (default:
    its size when the reading starts; a line that goes on past it is read whole). A file of
    up to :data:`_WHOLE` bytes is read in one call and its lines cut from those bytes: one
    system call and one hash update in all, where a line at a time costs a few of each per
    line, and each gives up the GIL to threads that may keep it for milliseconds. A longer
    file is read a line at a time, and no line is held here while its reader has it (nothing
    of it stays in this frame); a long line is read in one piece after finding its end, never
    joined from pieces. ``reading`` is fed every byte read.

    Raises:
        Changed: the file ends before ``end`` (it was cut while it was read).
    """
    if isinstance(source, Path):
        with source.open("rb") as file:
            yield from file_lines(file, end=end, reading=reading)
        return
    at = [source.tell()]
    head = source.read(len(_BOM))
    if head != _BOM:
        source.seek(at[0])
    else:
        at[0] += len(head)
        if reading is not None:
            reading.feed(head, at[0])
    size = os.fstat(source.fileno()).st_size if end is None else end
    if size - at[0] <= _WHOLE:
        yield from _lines_in(_whole(source, at[0], size, reading))
        return
    while at[0] < size:
        yield _line(source, reading, at)


_WHOLE = 2**22
"""The size up to which :func:`file_lines` reads a file in one call."""


def _whole(file: BinaryIO, offset: int, size: int, reading: Reading | None) -> bytes:
    """The bytes from ``offset`` to ``size`` and on to the end of the line there (fed)."""
    data = file.read(size - offset) if size > offset else b""
    if len(data) < size - offset:
        if reading is not None:
            reading.changed()
        raise Changed("the file changed while it was read (it was cut); import it again")
    if data and not data.endswith(b"\n"):
        data += _read_line(file)  # the last line goes on past ``size``: read it whole
    if reading is not None:
        reading.feed(data, offset + len(data))
    return data


def _lines_in(data: bytes, start: int = 0) -> Iterator[bytes]:
    """The lines of ``data`` from ``start``, each with its newline (the last may lack one)."""
    size = len(data)
    while start < size:
        end = data.find(b"\n", start) + 1 or size
        yield data[start:end]
        start = end


def _line(file: BinaryIO, reading: Reading | None, at: list[int]) -> bytes:
    """The next line, fed to ``reading``, with ``at[0]`` moved past it.

    Raises:
        Changed: the file ends first.
    """
    line = _read_line(file)
    if not line:
        if reading is not None:
            reading.changed()
        raise Changed("the file changed while it was read (it was cut); import it again")
    at[0] += len(line)
    if reading is not None:
        reading.feed(line, at[0])
    return line


_PIECE = 2**20
"""How much of a line :func:`_read_line` reads before it looks for the line's end instead."""


def _read_line(file: BinaryIO) -> bytes:
    start = file.tell()
    raw = file.readline(_PIECE)
    if len(raw) < _PIECE or raw.endswith(b"\n"):
        return raw
    del raw
    while (piece := file.readline(_PIECE)) and not piece.endswith(b"\n"):
        pass
    end = file.tell()
    file.seek(start)
    return file.read(end - start)


def split_lines(data: bytes) -> Iterator[bytes]:
    """The lines of ``data`` (a leading BOM dropped), one at a time: no list, no copy of it."""
    return _lines_in(data, len(_BOM) if data.startswith(_BOM) else 0)


def _joined_objects(line: bytes) -> list[dict[str, Any]] | None:
    """The objects of a line made only of two or more JSON objects, else ``None``."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None
    pieces: list[dict[str, Any]] = []
    pos = 0
    while pos < len(text):
        try:
            _, end = _DECODER.raw_decode(text, pos)
            piece = orjson.loads(text[pos:end])
        except (ValueError, RecursionError):  # orjson's error is a ValueError
            return None
        if not isinstance(piece, dict):
            return None
        pieces.append(piece)
        pos = end
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return pieces if len(pieces) > 1 else None


def read_json(data: bytes) -> Any:
    """A whole JSON document (``ValueError`` naming the problem if it is not one)."""
    try:
        return orjson.loads(data.removeprefix(_BOM))
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not a JSON document ({_short(exc)})") from None


def _short(exc: Exception) -> str:
    return str(exc).split(":", 1)[0]


_EPOCH_MS = 10**11
"""Numbers above this are milliseconds since the epoch (seconds reach it in the year 5138)."""


def parse_time(value: object) -> tuple[datetime | None, bool]:
    """A source timestamp as an aware UTC datetime, and whether it said its zone.

    ISO-8601 text (``Z`` or an offset; without one it is taken as UTC and ``False`` says so) and
    numbers since the epoch (seconds, or milliseconds when large) are read; anything else,
    including times out of range, gives ``(None, False)``.
    """
    if isinstance(value, bool):
        return None, False
    try:
        if isinstance(value, int | float):
            seconds = value / 1000 if abs(value) >= _EPOCH_MS else value
            return datetime.fromtimestamp(seconds, UTC), True
        if isinstance(value, str) and value[:4].isdigit():
            moment = datetime.fromisoformat(value.strip())
            if moment.tzinfo is None:
                return moment.replace(tzinfo=UTC), False
            return moment.astimezone(UTC), True
    except (ValueError, OverflowError, OSError):
        pass
    return None, False


def format_time(moment: datetime) -> str:
    """The store's timestamp text: ISO-8601, UTC, microseconds."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def stamp(value: object, source: dict[str, Any]) -> datetime | None:
    """:func:`parse_time` of a source value, noting in ``source`` a time it could not keep.

    ``time_invalid`` marks a value that is not a time (the row takes a neighbour's time),
    ``time_assumed_utc`` one without a zone; the raw value stays in the source record.
    """
    moment, exact = parse_time(value)
    if moment is None and value is not None:
        source["time_invalid"] = True
    elif moment is not None and not exact:
        source["time_assumed_utc"] = True
    return moment


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of a file, read a megabyte at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while piece := file.read(2**20):
            digest.update(piece)
    return digest.hexdigest()
