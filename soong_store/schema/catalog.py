"""The catalog of session tables: the one place that names them and knows where they live.

Each session owns ``nodes_<sid>`` and ``events_<sid>``. They are SQLAlchemy Core tables built on a
MetaData of their own (never Alembic's), from a session id validated before any name is formed,
in the lean shape measured in ``docs/scaling.md``: the seed's columns, ``WITHOUT ROWID`` on
SQLite (each table is its primary key's b-tree), the unique and lookup indexes the writer and
the reads need, and no CHECK text or foreign keys (the writer guarantees what they did; ``check``
finds it after the fact). Pairs stored by older versions, with CHECKs and foreign keys, hold the
same columns and are read and written by the same tables. Built tables are cached with a bound,
so thousands of sessions do not mean thousands of live ``Table`` objects.

A pair is created with the session's first write (:func:`create_pair`), not with the session:
an empty session is two rows. ``session_files`` (a global table) names the file of every pair
that exists, ``main`` for the database itself or a shard file (``shards/0001.sqlite``) where an
idle session's pair was moved (:mod:`soong_store.sql.moves`), with the move's epoch; a session
without a row has no pair, and reads answer for it as for an empty session (:func:`tables_of`
returns ``None``). A pair in a shard is read through the shard attached to the connection, and
only if the shard's own ``shard_pairs`` holds the copy of exactly the epoch the catalog names
(else it moved meanwhile: the read starts again; the rows and the shards' own table are read by
:mod:`soong_store.schema.pair_files`). Callers only ever ask the catalog: for a
session's tables, whether it has them, their names (for a revision over every session), or which
session tables are stored (for the integrity check).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from weakref import WeakKeyDictionary

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Index,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    bindparam,
    delete,
    inspect,
    select,
)
from sqlalchemy.engine import Dialect

from soong_store.backends.base import dialect_of
from soong_store.backends.link import Link, engine_connection
from soong_store.backends.values import BeforeBegin
from soong_store.model.ids import check_session_id
from soong_store.schema.models import (
    INTEGER,
    session_files_table,
    session_moves_table,
    sessions_table,
)
from soong_store.schema.pair_files import (
    HOT_GREW,
    attached_alias,
    copy_epoch,
    look_again,
    move_of,
    note_journaled,
    placement,
)

NODES_PREFIX = "nodes_"
EVENTS_PREFIX = "events_"
_MAX_NAME = 63  # PostgreSQL's identifier limit; SQLite has none.
CACHE_SIZE = 64
"""How many sessions' tables (and writer statements) stay built: each is a few hundred KB of
SQLAlchemy objects, and RSS after touching 1,000 sessions must stay under 100 MB."""
MAIN = "main"
"""The ``session_files.file`` of a pair that lives in the main database."""


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


def stored_tables(connection: Connection, file: str = MAIN) -> StoredTables:
    """Which session tables a file holds: the main database, or a shard (attached first).

    For a shard not attached to ``connection`` this raises
    :class:`~soong_store.backends.values.BeforeBegin` (attach it, then read again).
    """
    dialect = dialect_of(connection)
    schema = None if file == MAIN else attached_alias(connection, file)
    found = [n for n in dialect.table_names(connection, schema) if is_session_table(n)]
    return StoredTables(found, fold_case=dialect.fold_case)


# -- placement: which sessions have a pair, and where -------------------------------------

PAIR_LOOKUP = (
    select(sessions_table.c.session_id, session_files_table.c.file)
    .select_from(sessions_table)
    .outerjoin(
        session_files_table,
        session_files_table.c.session_id == sessions_table.c.session_id,
    )
    .where(sessions_table.c.session_id == bindparam("p_session"))
)
"""One row if the session exists: its id and its pair's file (``None``: no pair yet)."""

_KNOWN_BOUND = 4096
_known: WeakKeyDictionary[Engine, OrderedDict[str, None]] = WeakKeyDictionary()


def shard_tables(connection: Connection, session_id: str, file: str, epoch: int) -> SessionTables:
    """The tables of a pair in shard ``file`` as attached to ``connection``, at ``epoch``.

    Raises :class:`~soong_store.backends.values.BeforeBegin` when the shard is not attached yet
    (attach it, then start again) or holds no copy of that epoch (it moved meanwhile).
    """
    return session_tables(session_id, _shard_alias(connection, session_id, file, epoch))


def _shard_alias(connection: Connection, session_id: str, file: str, epoch: int) -> str:
    """The alias shard ``file`` is attached as, once it is known to hold the copy of ``epoch``."""
    alias = attached_alias(connection, file)
    if copy_epoch(connection, alias, session_id) != epoch:
        raise BeforeBegin(look_again, f"session {session_id} moved out of {file}")
    return alias


def tables_of(connection: Link, session_id: str) -> SessionTables | None:
    """The tables of ``session_id`` if it has a pair (``None``: it was never written).

    A pair in a shard is read where the shard is attached (:func:`shard_tables`): on an
    engine's connection, never a link.
    """
    place = placement(connection, session_id)
    if place is None:
        return None
    file, epoch = place
    if file == MAIN:
        return session_tables(session_id)
    return shard_tables(_attaching(connection, session_id, file), session_id, file, epoch)


def _attaching(connection: Link, session_id: str, file: str) -> Connection:
    """``connection`` as one a shard is attached to: an engine's (a link goes to a thread)."""
    return engine_connection(connection, f"session {session_id!r} is in shard {file!r}")


def nodes_sql_name(connection: Link, session_id: str) -> str | None:
    """The node table of ``session_id`` as SQL names it here (schema, quotes), if it has a pair.

    For reads written as SQL text (:mod:`soong_store.sql.climb_sql`): the name alone, found as
    :func:`tables_of` finds the pair but without building its ``Table`` objects, which took a
    new process's first read about half a millisecond.
    """
    place = placement(connection, session_id)
    if place is None:
        return None
    file, epoch = place
    schema = None
    if file != MAIN:
        schema = _shard_alias(_attaching(connection, session_id, file), session_id, file, epoch)
    return rendered_nodes_name(connection.dialect, session_id, schema)


def rendered_nodes_name(dialect: Dialect, session_id: str, schema: str | None = None) -> str:
    """The name of a session's node table (in ``schema``) as ``dialect`` writes it in SQL.

    What the dialect renders for :func:`session_tables`' node table, quotes and schema alike.
    """
    preparer = dialect.identifier_preparer
    name = preparer.quote(NODES_PREFIX + check_session_id(session_id))
    return name if schema is None else f"{preparer.quote_schema(schema)}.{name}"


def create_pair(connection: Connection, session_id: str) -> SessionTables:
    """Create a session's pair in the main database and its catalog row (the caller's transaction).

    Nothing is remembered as known before the transaction commits: a rolled-back creation must
    not make a later write skip the catalog.
    """
    tables = session_tables(session_id)
    tables.create(connection)
    connection.execute(
        session_files_table.insert(), {"session_id": session_id, "file": MAIN, "epoch": 0}
    )
    connection.info[HOT_GREW] = True
    return tables


def drop_pair(connection: Connection, session_id: str) -> None:
    """Drop a session's pair and its catalog row, if it has them (a pair-less session: no-op).

    A pair in a shard is not dropped here (that would commit a second file): a journal row
    naming its file takes the catalog row's place, and the writer's maintenance drops the copy
    (:func:`soong_store.sql.moves.recover`). A journal row already there (a move under way)
    stays: with the catalog row gone, recovery drops the pair from both files it names.
    """
    forget_pair(connection.engine, session_id)
    place = placement(connection, session_id)
    # Named in the main database: an unqualified name the main file lacks finds a shard's.
    tables = session_tables(session_id, MAIN if dialect_of(connection).places_pairs else None)
    if (place is not None and place[0] == MAIN) or tables.exist(connection):
        for table in (tables.events, tables.nodes):
            table.drop(connection, checkfirst=True)
    if place is not None and place[0] != MAIN and move_of(connection, session_id) is None:
        file, epoch = place
        connection.execute(
            session_moves_table.insert(),
            {"session_id": session_id, "source": file, "target": file, "epoch": epoch + 1},
        )
        note_journaled(connection, session_id)
    connection.execute(
        delete(session_files_table).where(session_files_table.c.session_id == session_id)
    )


def paired_session_ids(
    connection: Connection, file: str = MAIN, *, validate: bool = True
) -> list[str]:
    """The ids of the sessions whose pair lives in ``file``, sorted.

    Validated (``InvalidIdentifier``) when they are to become table names; the integrity check
    reads them as stored, to report a bad one.
    """
    column = session_files_table.c.session_id
    rows = connection.execute(
        select(column).where(session_files_table.c.file == file).order_by(column)
    ).scalars()
    return [check_session_id(sid) if validate else str(sid) for sid in rows]


def knows_pair(connection: Connection, session_id: str) -> bool:
    """Whether this process saw ``session_id``'s pair committed in the main database.

    A hint that lets the writer skip the catalog lookup; a pair dropped since by another process
    shows as a missing table, and the writer then forgets it and asks the catalog. Not while a
    shard is attached: a name the main database lacks would then find the shard's copy.
    """
    if dialect_of(connection).attached_files(connection):
        return False
    known = _known.get(connection.engine)
    if known is None or session_id not in known:
        return False
    known.move_to_end(session_id)
    return True


def remember_pair(engine: Engine, session_id: str) -> None:
    """Note that ``session_id``'s pair was found committed (bounded, least recent forgotten)."""
    known = _known.setdefault(engine, OrderedDict())
    known[session_id] = None
    known.move_to_end(session_id)
    if len(known) > _KNOWN_BOUND:
        known.popitem(last=False)


def forget_pair(engine: Engine, session_id: str) -> None:
    """Drop the hint for ``session_id`` (its pair was dropped, or a lookup found it missing)."""
    known = _known.get(engine)
    if known is not None:
        known.pop(session_id, None)


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
