"""The tables of one session: ``nodes_<sid>`` and ``events_<sid>``, their names and their shape.

Each session owns a pair. They are SQLAlchemy Core tables built on a MetaData of their own (never
Alembic's), from a session id validated before any name is formed, in the lean shape measured in
``docs/scaling.md``: the seed's columns, ``WITHOUT ROWID`` on SQLite (each table is its primary
key's b-tree), the unique and lookup indexes the writer and the reads need, and no CHECK text or
foreign keys (the writer guarantees what they did; ``check`` finds it after the fact). Pairs
stored by older versions, with CHECKs and foreign keys, hold the same columns and are read and
written by the same tables. Built tables are cached with a bound, so thousands of sessions do
not mean thousands of live ``Table`` objects. Where a pair lives is the catalog's business
(:mod:`soong_store.catalog.lookup`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

from sqlalchemy import (
    Column,
    Connection,
    Index,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    inspect,
)
from sqlalchemy.engine import Dialect

from soong_store.model.checks import check_session_id
from soong_store.schema.tables import INTEGER

NODES_PREFIX = "nodes_"


EVENTS_PREFIX = "events_"


_MAX_NAME = 63  # PostgreSQL's identifier limit; SQLite has none.


CACHE_SIZE = 64
"""How many sessions' tables (and writer statements) stay built: each is a few hundred KB of
SQLAlchemy objects, and RSS after touching 1,000 sessions must stay under 100 MB."""


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
        return pair_exists(connection, self.session_id, self.nodes.schema)


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


def pair_exists(connection: Connection, session_id: str, schema: str | None = None) -> bool:
    """Whether either table of a session's pair exists, asked by name (no ``Table`` is built).

    Names are compared as the database compares them.
    """
    found = inspect(connection)
    return any(found.has_table(name, schema=schema) for name in session_table_names(session_id))


def is_session_table(name: str) -> bool:
    """Whether a table name belongs to a session (so that Alembic's autogenerate skips it)."""
    return name.startswith((NODES_PREFIX, EVENTS_PREFIX))


def table_owner(name: str) -> str | None:
    """The session id a session table's name holds (``None`` for any other table)."""
    for prefix in (NODES_PREFIX, EVENTS_PREFIX):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return None


def rendered_nodes_name(dialect: Dialect, session_id: str, schema: str | None = None) -> str:
    """The name of a session's node table (in ``schema``) as ``dialect`` writes it in SQL.

    What the dialect renders for :func:`session_tables`' node table, quotes and schema alike.
    """
    preparer = dialect.identifier_preparer
    name = preparer.quote(NODES_PREFIX + check_session_id(session_id))
    return name if schema is None else f"{preparer.quote_schema(schema)}.{name}"


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
        Column("parent_id", Text),
        Column("agent_id", Text, nullable=False),
        Column("run_id", Text),
        Column("role", Text, nullable=False),
        Column("node_type", Text, nullable=False),
        Column("content_json", Text, nullable=False),
        Column("metadata_json", Text),
        Column("token_count", INTEGER),
        Column("created_at", Text, nullable=False),
        UniqueConstraint("node_seq", name=_name(nodes_name, "node_seq_uq")),
        Index(_name(nodes_name, "parent_id_ix"), "parent_id"),
        sqlite_with_rowid=False,
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
        Column("node_id", Text),
        Column("tool_call_id", Text),
        Column("payload_json", Text),
        Column("created_at", Text, nullable=False),
        UniqueConstraint("seq", name=_name(events_name, "seq_uq")),
        UniqueConstraint("run_id", "run_seq", name=_name(events_name, "run_seq_uq")),
        Index(_name(events_name, "node_id_ix"), "node_id"),
        sqlite_with_rowid=False,
    )
    return SessionTables(session_id, nodes, events)
