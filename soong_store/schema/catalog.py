"""The catalog of session tables: the one place that names them and knows where they live.

Each session owns ``nodes_<sid>`` and ``events_<sid>``. They are SQLAlchemy Core tables built on a
MetaData of their own (never Alembic's), from a session id validated before any name is formed.
Every constraint is named: Alembic's batch mode keeps only named CHECK constraints when it
rebuilds a table, and a revision over every session's tables must not lose them. Built tables are
cached with a bound, so thousands of sessions do not mean thousands of live
``Table`` objects.

Every pair lives in the main database today (the default schema). A ``schema`` may be given so
that a later change can move idle sessions into attached shard databases, or PostgreSQL schemas,
without touching any caller: callers only ever ask this module, for a session's tables
(:func:`session_tables`), their names (:func:`session_table_names`, for a revision over every
session), or which session tables are stored (:func:`stored_tables`, for the integrity check).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from sqlalchemy import (
    CheckConstraint,
    Column,
    Connection,
    ForeignKey,
    Index,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    inspect,
)

from soong_store.backends.base import dialect_of
from soong_store.model.enums import EventLevel, NodeType, Role
from soong_store.model.ids import check_session_id
from soong_store.schema.models import INTEGER

NODES_PREFIX = "nodes_"
EVENTS_PREFIX = "events_"
_MAX_NAME = 63  # PostgreSQL's identifier limit; SQLite has none.
CACHE_SIZE = 1024


@dataclass(frozen=True, slots=True)
class SessionTables:
    """The pair of tables of one session."""

    session_id: str
    nodes: Table
    events: Table

    def create(self, connection: Connection) -> None:
        """Create both tables and their indexes inside the caller's transaction."""
        self.nodes.create(connection)
        self.events.create(connection)

    def drop(self, connection: Connection) -> None:
        """Drop both tables (events first: they refer to nodes)."""
        self.events.drop(connection)
        self.nodes.drop(connection)

    def exist(self, connection: Connection) -> bool:
        """Whether either table exists (names compared as the database compares them)."""
        found = inspect(connection)
        return any(found.has_table(t.name, schema=t.schema) for t in (self.nodes, self.events))


def session_tables(session_id: str, schema: str | None = None) -> SessionTables:
    """Return the tables of ``session_id`` (validated first: it becomes part of two names)."""
    return _build(check_session_id(session_id), schema)


def nodes_table_name(session_id: str) -> str:
    """The name of a session's node table."""
    return NODES_PREFIX + check_session_id(session_id)


def events_table_name(session_id: str) -> str:
    """The name of a session's event table."""
    return EVENTS_PREFIX + check_session_id(session_id)


def session_table_names(session_id: str) -> tuple[str, str]:
    """The names of a session's node and event tables."""
    return nodes_table_name(session_id), events_table_name(session_id)


def is_session_table(name: str) -> bool:
    """Whether a table name belongs to a session (so that Alembic's autogenerate skips it)."""
    return name.startswith((NODES_PREFIX, EVENTS_PREFIX))


def table_owner(name: str) -> str | None:
    """The session id a session table's name holds (``None`` for any other table)."""
    for prefix in (NODES_PREFIX, EVENTS_PREFIX):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return None


class StoredTables:
    """The session tables one read found where pairs live, compared as the database compares."""

    __slots__ = ("_fold_case", "_keys", "names")

    def __init__(self, names: Iterable[str], *, fold_case: bool) -> None:
        self.names: tuple[str, ...] = tuple(sorted(names))
        """Every session table found, sorted, as stored."""
        self._fold_case = fold_case
        self._keys = frozenset(self._key(n) for n in self.names)

    def _key(self, name: str) -> str:
        return name.lower() if self._fold_case else name

    def has(self, name: str) -> bool:
        """Whether a table of that name is stored."""
        return self._key(name) in self._keys

    def missing(self, session_id: str) -> list[str]:
        """The tables of a session's pair that are not stored."""
        return [n for n in session_table_names(session_id) if not self.has(n)]

    def orphans(self, session_ids: Iterable[str]) -> list[str]:
        """The stored session tables whose session is none of ``session_ids``."""
        owners = {self._key(sid) for sid in session_ids}
        return [n for n in self.names if self._key(table_owner(n) or "") not in owners]


def stored_tables(connection: Connection) -> StoredTables:
    """Which session tables the database holds (in the main database, where every pair is)."""
    dialect = dialect_of(connection)
    found = [n for n in dialect.table_names(connection) if is_session_table(n)]
    return StoredTables(found, fold_case=dialect.fold_case)


def _one_of(column: str, enum: type[StrEnum]) -> CheckConstraint:
    values = ", ".join(f"'{member.value}'" for member in enum)
    return CheckConstraint(f"{column} IN ({values})", name=f"ck_{column}")


def _name(table: str, suffix: str) -> str:
    """A schema-object name derived from a table name, kept within 63 characters, still unique."""
    name = f"{table}_{suffix}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(table.encode()).hexdigest()[:10]
    keep = _MAX_NAME - len(suffix) - len(digest) - 2
    return f"{table[:keep]}_{digest}_{suffix}"


@lru_cache(maxsize=CACHE_SIZE)
def _build(session_id: str, schema: str | None) -> SessionTables:
    metadata = MetaData(schema=schema)
    nodes_name = NODES_PREFIX + session_id
    events_name = EVENTS_PREFIX + session_id
    nodes = Table(
        nodes_name,
        metadata,
        Column("node_id", Text, primary_key=True),
        Column("node_seq", INTEGER, nullable=False),
        Column(
            "parent_id",
            Text,
            ForeignKey(f"{nodes_name}.node_id", deferrable=True, initially="DEFERRED"),
        ),
        Column("agent_id", Text, nullable=False),
        Column("run_id", Text),
        Column("role", Text, nullable=False),
        Column("node_type", Text, nullable=False),
        Column("content_json", Text, nullable=False),
        Column("metadata_json", Text),
        Column("token_count", INTEGER),
        Column("created_at", Text, nullable=False),
        UniqueConstraint("node_seq", name=_name(nodes_name, "node_seq_uq")),
        _one_of("role", Role),
        _one_of("node_type", NodeType),
        CheckConstraint("node_seq >= 1", name="ck_node_seq"),
        CheckConstraint("token_count IS NULL OR token_count >= 0", name="ck_token_count"),
        Index(_name(nodes_name, "parent_id_ix"), "parent_id"),
    )
    events = Table(
        events_name,
        metadata,
        Column("event_id", Text, primary_key=True),
        Column("seq", INTEGER, nullable=False),
        Column("run_seq", INTEGER),
        Column("agent_id", Text),
        Column("run_id", Text),
        Column("level", Text, nullable=False),
        Column("event_type", Text, nullable=False),
        Column(
            "node_id",
            Text,
            ForeignKey(f"{nodes_name}.node_id", deferrable=True, initially="DEFERRED"),
        ),
        Column("tool_call_id", Text),
        Column("payload_json", Text),
        Column("created_at", Text, nullable=False),
        UniqueConstraint("seq", name=_name(events_name, "seq_uq")),
        UniqueConstraint("run_id", "run_seq", name=_name(events_name, "run_seq_uq")),
        _one_of("level", EventLevel),
        CheckConstraint("seq >= 1", name="ck_seq"),
        CheckConstraint("(run_id IS NULL) = (run_seq IS NULL)", name="ck_run_seq"),
        Index(_name(events_name, "node_id_ix"), "node_id"),
    )
    return SessionTables(session_id, nodes, events)
