"""Reading source files: JSON Lines with recovery of damaged lines, JSON documents, timestamps.

Every value is parsed by orjson (NaN and Infinity refused, integers within 64 bits), so what a
parser gets can always be stored. A JSON Lines file is read line by line and no line is fatal:

- a line holding several JSON objects one after the other (a writer that lost a newline) is
  split into them (``recovered``), when the whole line is exactly those objects;
- anything else that is not one JSON object (truncated JSON, a string, a number, a list, bytes
  that are not UTF-8, values nested deeper than orjson's 1,024 levels) is ``skipped``; both
  are reported as :class:`LineIssue` with the line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson

from soong_store.importers._model import LineIssue

_DECODER = json.JSONDecoder()
_BOM = b"\xef\xbb\xbf"


def read_jsonl(data: bytes) -> tuple[list[tuple[int, dict[str, Any]]], list[LineIssue]]:
    """The JSON objects of a JSON Lines file with their 1-based line numbers, and the issues."""
    records: list[tuple[int, dict[str, Any]]] = []
    issues: list[LineIssue] = []
    for lineno, raw in enumerate(_lines(data), 1):
        line = raw.strip()
        if not line:
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            pieces = _joined_objects(line)
            if pieces is None:
                issues.append(LineIssue(lineno, "skipped", f"not JSON ({_short(exc)})"))
                continue
            records.extend((lineno, piece) for piece in pieces)
            issues.append(
                LineIssue(lineno, "recovered", f"{len(pieces)} JSON objects joined on one line")
            )
            continue
        if isinstance(value, dict):
            records.append((lineno, value))
        else:
            kind = type(value).__name__ if value is not None else "null"
            issues.append(LineIssue(lineno, "skipped", f"a JSON {kind}, not an object"))
    return records, issues


def _lines(data: bytes) -> Iterator[bytes]:
    """The lines of ``data`` (a leading BOM dropped), one at a time: no list, no copy of it."""
    start = len(_BOM) if data.startswith(_BOM) else 0
    while start <= len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        yield data[start:end]
        start = end + 1


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
