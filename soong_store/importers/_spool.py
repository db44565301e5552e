"""Parsed content on disk, so that a parse holds the tree's shape and not the file's content.

A long transcript's entries are small in shape (ids, parent, kind, time) and large in content
(texts, tool outputs, images). :class:`ContentSpool` keeps the content in a temporary file from
the moment an entry is made until its node row is made (:mod:`soong_store.importers._rows`).
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Iterator
from typing import Any, BinaryIO

import orjson

from soong_store.errors import StorageError
from soong_store.importers._model import Artifact, Entry, Event
from soong_store.importers._read import load_value


class ContentSpool:
    """Entries' content on disk while a parse keeps only the tree's shape in memory.

    :meth:`park` writes an entry's blocks, source and artifact bytes to a temporary file and
    leaves in the entry only what the tree's rules, the counts and the events read: each
    block's type, tool call id and error flag, the source's id, line and ``parent_missing``,
    and the artifacts without their bytes. What is set on the source afterwards (the tree's
    notes) stays in the entry and is laid over the stored source by :meth:`load`, which gives
    the whole content back when the entry's node row is made. The file is gone when closed.

    Where the file stands is counted here, not asked of it: ``tell`` and ``seek`` are system
    calls that let go of Python's lock, and an import's other threads keep it for a while
    before giving it back. Entries are mostly read back in the order they were parked, so
    reading seeks only where that order differs.
    """

    def __init__(self) -> None:
        try:
            self._file: BinaryIO = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        except OSError as exc:
            raise StorageError(f"cannot keep an import's content on disk: {exc.strerror}") from None
        self._end = 0  # the file's length: where the next line goes
        self._pos = 0  # where the file stands (-1: not known)

    def park(self, entry: Entry) -> None:
        """Write the entry's content to the file and keep only its shape in the entry."""
        arts = {a.key: base64.b64encode(a.data).decode() for a in entry.artifacts}
        entry.stored = self._append(orjson.dumps([entry.blocks, entry.source, arts]))
        entry.blocks = [_shape(block) for block in entry.blocks]
        entry.source = {k: entry.source[k] for k in _SOURCE_SHAPE if k in entry.source}
        entry.artifacts = [
            Artifact(a.key, b"", a.mime_type, a.filename, a.summary) for a in entry.artifacts
        ]

    def load(self, entry: Entry) -> tuple[list[dict[str, Any]], dict[str, Any], list[Artifact]]:
        """The entry's whole blocks, source and artifacts (the entry's own if not parked)."""
        if entry.stored is None:
            return entry.blocks, entry.source, entry.artifacts
        blocks, source, arts = load_value([self._line(entry.stored)])
        artifacts = [
            Artifact(a.key, base64.b64decode(arts[a.key]), a.mime_type, a.filename, a.summary)
            for a in entry.artifacts
        ]
        return blocks, source | entry.source, artifacts

    def park_event(self, event: Event) -> None:
        """Write the event's payload to the file and drop it from the event."""
        event.source_line = event.line
        event.stored = self._append(orjson.dumps(event.payload))
        event.payload = None

    def payload(self, event: Event) -> Any:
        """The event's payload (the event's own if not parked)."""
        if event.stored is None:
            return event.payload
        return load_value([self._line(event.stored)])

    def _line(self, at: int) -> bytes:
        """The line that starts at ``at``."""
        self._go(at)
        self._pos = -1
        line = self._file.readline()
        self._pos = at + len(line)
        return line

    def _append(self, data: bytes) -> int:
        """Write one line at the end of the file; where it starts."""
        at = self._end
        try:
            self._go(at)
            self._pos = -1
            self._file.write(data)
            self._file.write(b"\n")
        except OSError as exc:
            raise StorageError(f"cannot keep an import's content on disk: {exc.strerror}") from None
        self._end = self._pos = at + len(data) + 1
        return at

    def _go(self, at: int) -> None:
        if at != self._pos:
            self._pos = -1
            self._file.seek(at)
            self._pos = at

    def close(self) -> None:
        """Remove the file."""
        self._file.close()


_SOURCE_SHAPE = ("id", "line", "parent_missing", "file_agent", "index", "replacement_index")
_TYPES: dict[Any, dict[str, Any]] = {}


def _shape(block: dict[str, Any]) -> dict[str, Any]:
    """What the tree, the counts and the events read of a block (read-only, maybe shared)."""
    kind = block.get("type")
    if kind == "tool_call":
        return {"type": kind, "tool_call_id": block.get("tool_call_id")}
    if kind == "tool_result":
        shape = {"type": kind, "tool_call_id": block.get("tool_call_id")}
        return shape | {"is_error": block.get("is_error")}
    return _TYPES.setdefault(kind, {"type": kind}) if isinstance(kind, str) else {"type": kind}


def export_file() -> BinaryIO:
    """A temporary file for the export made of a conversation (gone when closed)."""
    try:
        return tempfile.TemporaryFile()
    except OSError as exc:
        raise StorageError(f"cannot write an import's export on disk: {exc.strerror}") from None


def write_export(lines: Iterator[str], out: BinaryIO) -> None:
    """Write the export made of a conversation to a file, then rewind it for the import.

    Written whole before the import reads it, the conversation's parsed shape is gone before
    the import keeps its own: the two never add up.
    """
    try:
        for line in lines:
            out.write(line.encode())
            out.write(b"\n")
        out.seek(0)
    except OSError as exc:
        raise StorageError(f"cannot write an import's export on disk: {exc.strerror}") from None
