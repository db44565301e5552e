"""The neutral model every format parser produces: sessions, agents, entries, events, artifacts.

A parser turns one source file into :class:`SourceSession` values and knows nothing of the store:
entries name their parent and agent by *keys* (strings unique within the session), blocks are
plain dicts in the store's block shapes, and artifact references name an :class:`Artifact` by
its key. :mod:`soong_store.importers._tree` rearranges the tree (compactions) and
:mod:`soong_store.importers._rows` turns the model into the store's export format.
"""

from __future__ import annotations

import base64
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, BinaryIO

import orjson

MAIN = "main"
"""The key of every session's root agent."""


@dataclass(frozen=True, slots=True)
class LineIssue:
    """A part of the source that could not be read as it stands.

    ``action`` is ``"skipped"`` (nothing of it was imported) or ``"recovered"`` (it was read in
    pieces, for example two JSON objects joined on one line). ``line`` is 1-based, 0 when the
    problem is not on a line (a JSON document as a whole).
    """

    line: int
    action: str
    reason: str


@dataclass(slots=True)
class Artifact:
    """Bytes found in the source (an image), stored as an artifact file."""

    key: str
    data: bytes
    mime_type: str | None = None
    filename: str | None = None
    summary: str | None = None


@dataclass(slots=True)
class Entry:
    """One source item that becomes a node.

    ``source`` becomes ``metadata["imported_from"]`` (the format name is added): the source's id,
    line, raw time and every field the blocks do not carry. ``keeps_from`` is set on a
    compaction: the key of the first entry the source kept after it.
    """

    key: str
    parent: str | None
    role: str
    node_type: str
    blocks: list[dict[str, Any]]
    source: dict[str, Any]
    time: datetime | None = None
    agent: str = MAIN
    position: int = 0
    token_count: int | None = None
    keeps_from: str | None = None
    artifacts: list[Artifact] = field(default_factory=list)
    stored: int | None = None
    """Where a :class:`ContentSpool` holds the content (``blocks`` and ``source`` its shape)."""


class ContentSpool:
    """Entries' content on disk while a parse keeps only the tree's shape in memory.

    :meth:`park` writes an entry's blocks, source and artifact bytes to a temporary file and
    leaves in the entry only what the tree's rules, the counts and the events read: each
    block's type, tool call id and error flag, the source's id, line and ``parent_missing``,
    and the artifacts without their bytes. What is set on the source afterwards (the tree's
    notes) stays in the entry and is laid over the stored source by :meth:`load`, which gives
    the whole content back when the entry's node row is made. The file is gone when closed.
    """

    def __init__(self) -> None:
        self._file: BinaryIO = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())

    def park(self, entry: Entry) -> None:
        """Write the entry's content to the file and keep only its shape in the entry."""
        arts = {a.key: base64.b64encode(a.data).decode() for a in entry.artifacts}
        self._file.seek(0, 2)
        entry.stored = self._file.tell()
        self._file.write(orjson.dumps([entry.blocks, entry.source, arts]))
        self._file.write(b"\n")
        entry.blocks = [_shape(block) for block in entry.blocks]
        entry.source = {k: entry.source[k] for k in _SOURCE_SHAPE if k in entry.source}
        entry.artifacts = [
            Artifact(a.key, b"", a.mime_type, a.filename, a.summary) for a in entry.artifacts
        ]

    def load(self, entry: Entry) -> tuple[list[dict[str, Any]], dict[str, Any], list[Artifact]]:
        """The entry's whole blocks, source and artifacts (the entry's own if not parked)."""
        if entry.stored is None:
            return entry.blocks, entry.source, entry.artifacts
        self._file.seek(entry.stored)
        blocks, source, arts = orjson.loads(self._file.readline())
        artifacts = [
            Artifact(a.key, base64.b64decode(arts[a.key]), a.mime_type, a.filename, a.summary)
            for a in entry.artifacts
        ]
        return blocks, source | entry.source, artifacts

    def park_event(self, event: Event) -> None:
        """Write the event's payload to the file and drop it from the event."""
        self._file.seek(0, 2)
        event.stored = self._file.tell()
        self._file.write(orjson.dumps(event.payload))
        self._file.write(b"\n")
        event.payload = None

    def payload(self, event: Event) -> Any:
        """The event's payload (the event's own if not parked)."""
        if event.stored is None:
            return event.payload
        self._file.seek(event.stored)
        return orjson.loads(self._file.readline())

    def close(self) -> None:
        """Remove the file."""
        self._file.close()


_SOURCE_SHAPE = ("id", "line", "parent_missing")
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


@dataclass(slots=True)
class Event:
    """A source record that has no place in the tree (settings, errors, progress, ...)."""

    event_type: str
    payload: Any
    time: datetime | None = None
    level: str = "info"
    agent: str | None = MAIN
    entry: str | None = None
    tool_call_id: str | None = None
    position: int = 0
    stored: int | None = None
    """Where a :class:`ContentSpool` holds the payload (``payload`` then ``None``)."""


@dataclass(slots=True)
class Agent:
    """A sub-agent or fork found in the source (the root agent is implicit)."""

    key: str
    agent_type: str
    metadata: dict[str, Any]
    fork_from: str | None = None


@dataclass(slots=True)
class SourceSession:
    """One conversation of a source file, ready to be built into rows."""

    format: str
    source_id: str
    cwd: str | None
    metadata: dict[str, Any]
    entries: list[Entry] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    agents: list[Agent] = field(default_factory=list)
    leaf: str | None = None
    time: datetime | None = None


@dataclass(slots=True)
class ParsedFile:
    """What a parser read from one file: its sessions and the lines it could not take whole."""

    format: str
    sessions: list[SourceSession]
    issues: list[LineIssue] = field(default_factory=list)
    spool: ContentSpool | None = None
    """Where the sessions' content waits, if the parser parked it (closed by the caller)."""
