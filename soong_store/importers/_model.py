"""The neutral model every format parser produces: sessions, agents, entries, events, artifacts.

A parser turns one source file into :class:`SourceSession` values and knows nothing of the store:
entries name their parent and agent by *keys* (strings unique within the session), blocks are
plain dicts in the store's block shapes, and artifact references name an :class:`Artifact` by
its key. :mod:`soong_store.importers._tree` rearranges the tree (compactions) and
:mod:`soong_store.importers._rows` turns the model into the store's export format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from soong_store.model.usage import fits

if TYPE_CHECKING:
    from soong_store.importers._spool import ContentSpool

MAIN = "main"
"""The key of every session's root agent."""


@dataclass(frozen=True, slots=True)
class LineIssue:
    """A part of the source that could not be read as it stands.

    ``action`` is ``"skipped"`` (nothing of it was imported), ``"recovered"`` (it was read in
    pieces, for example two JSON objects joined on one line) or ``"unfinished"`` (a last line
    still being written: nothing of it was imported, a later import takes it once it is
    whole). ``line`` is 1-based, 0 when the problem is not on a line (a JSON document as a
    whole).
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
    """Where the parse's ``ContentSpool`` holds the content (``blocks`` and ``source``: shape)."""
    transcript: str = ""
    """The source file it came from, when a conversation is spread over several ("" the main)."""


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
    """Where the parse's ``ContentSpool`` holds the payload (``payload`` then ``None``)."""
    transcript: str = ""
    """As :attr:`Entry.transcript`."""

    @property
    def line(self) -> int | None:
        """The source line the event was read from, if the source has lines."""
        if self.source_line is not None:
            return self.source_line
        payload = self.payload
        found = payload.get("line") if isinstance(payload, dict) else None
        return found if isinstance(found, int) and found > 0 else None

    source_line: int | None = None
    """The line, kept here when the payload is parked in a spool."""


@dataclass(slots=True)
class Call:
    """One model call the source records usage of (one dict of a run's usage).

    ``key`` names the call within its transcript: a later call of the same key (the same
    response written over several lines) replaces the earlier one. ``entry`` is the entry it
    was read from, if any; else ``agent`` and ``position`` place it in its turn.
    """

    key: str
    usage: dict[str, Any]
    position: int
    entry: str | None = None
    agent: str = MAIN


def usage_of(
    model: Any, counts: dict[str, Any], line: int, issues: list[LineIssue]
) -> dict[str, Any]:
    """A call's usage as a run holds it, from the model and counts (by usage key) the source gives.

    Keys the source does not give (``None``) are left out. A value the usage shape refuses (a
    count that is not an integer from 0 to :data:`~soong_store.model.usage.MAX_TOKENS`, a cost
    that is not a finite number of dollars >= 0, a model that is not a name) is dropped and
    reported in ``issues`` as recovered: the rules are the store's own (:func:`fits`).
    """
    usage: dict[str, Any] = {}
    if model is not None:
        if fits("model", model):
            usage["model"] = model
        else:
            issues.append(LineIssue(line, "recovered", f"usage: model {model!r:.40} dropped"))
    for name, value in counts.items():
        if value is None:
            continue
        if fits(name, value):
            usage[name] = value
        else:
            issues.append(LineIssue(line, "recovered", f"usage: {name} {value!r:.40} dropped"))
    return usage


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
    calls: list[Call] = field(default_factory=list)
    """The model calls the source records usage of (in source order)."""
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
