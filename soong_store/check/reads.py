"""The reads of ``check``: the home's facts, a shard's, and the raw rows of many sessions at once.

Every read job costs a hand-off to a reader thread, a connection checkout and a transaction,
several times what the rules cost a session; a check of a whole home pays that per job. So the
sessions of one file are read in batches (:data:`BATCH`), each batch in one snapshot, with the
search index's rows of each session in the same snapshot. What a batch read cannot do (a
damaged page of one session's tables) is done again session by session by the caller
(:mod:`soong_store.check.run`), so that only that session is reported unreadable.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import Column, Connection, MetaData, Select, Table, Text, bindparam, func, select
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import SQLAlchemyError

from soong_store.backends.base import backend_class, shard_files_of
from soong_store.backends.prepared import Prepared, Runner
from soong_store.backends.values import BeforeBegin
from soong_store.catalog import placement as pair_files
from soong_store.catalog.lookup import MAIN, StoredTables, stored_tables
from soong_store.catalog.pair_text import TEMPLATE
from soong_store.check.search_index import compare
from soong_store.errors import SoongStoreError
from soong_store.model.first_event import created_event_row
from soong_store.rules.session import Problem, SessionRows
from soong_store.schema import session_tables
from soong_store.schema.tables import (
    agents_table,
    artifacts_table,
    runs_table,
    session_files_table,
    sessions_table,
)
from soong_store.search.index import node_text, search_text_table

__all__ = [
    "BATCH",
    "Batch",
    "Database",
    "Facts",
    "Shard",
    "database_facts",
    "read_batch",
    "search_problems",
    "session_facts",
    "shard_facts",
    "shard_links",
]

BATCH = 250
"""Sessions read in one snapshot: half a shard, a fraction of a second of reading."""

_REVISION = Table("alembic_version", MetaData(), Column("version_num", Text))


@dataclass(frozen=True, slots=True)
class Database:
    """The session ids to check, where their pairs are, the main file's session tables, paths."""

    sessions: list[str]
    placed: dict[str, tuple[str, int]]
    """File and epoch of each pair, as the catalog names them."""
    journaled: dict[str, set[str]]
    """The files a move under way of each session names."""
    tables: StoredTables
    paths: set[str]
    revision: str | None
    """The schema revision of the main database (``None``: none recorded)."""

    def named(self, file: str) -> set[str]:
        """The sessions whose pair may be in ``file``: placed there, or named by a move."""
        placed = {sid for sid, (where, _) in self.placed.items() if where == file}
        return placed | {sid for sid, files in self.journaled.items() if file in files}


def database_facts(connection: Connection, session_id: str | None) -> Database:
    """What the main database says of every session (or one), in one snapshot."""
    column = sessions_table.c.session_id
    wanted = select(column).order_by(column)
    if session_id:
        wanted = wanted.where(column == session_id)
    sessions = [str(sid) for sid in connection.execute(wanted).scalars()]
    paths = set(connection.execute(select(artifacts_table.c.path).distinct()).scalars())
    placed = pair_files.placements(connection, session_id or None)
    journaled = pair_files.journaled_files(connection)
    revision = None
    if placed and any(file != MAIN for file, _ in placed.values()):  # only shards compare it
        revision = connection.execute(select(_REVISION.c.version_num)).scalar()
    return Database(
        sessions,
        placed,
        journaled,
        stored_tables(connection),
        paths,
        None if revision is None else str(revision),
    )


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard's session tables, the copies its ``shard_pairs`` lists and its revision."""

    tables: StoredTables
    copies: dict[str, int]
    revision: str | None
    """Its ``shard_revision`` row (``None``: a shard from before revisions were kept)."""


def shard_links(connection: Connection) -> list[Problem]:
    """A link where shard files live: the store refuses it (it never follows one), say where."""
    shards = shard_files_of(connection)
    if shards is None:
        return []
    return [
        Problem("shard_link", None, (name,), f"{name} is a symbolic link: the store refuses it")
        for name in shards.linked_files(connection)
    ]


def shard_facts(connection: Connection, file: str) -> Shard | None:
    """A shard's tables, copies and revision, in one snapshot (attached first).

    ``None`` when the catalog places no pair there any more: the writer emptied it since the
    catalog was read, and may have removed it; its sessions are read where they are now.
    """
    column = session_files_table.c.file
    if connection.execute(select(column).where(column == file).limit(1)).first() is None:
        return None
    tables = stored_tables(connection, file)
    alias = pair_files.attached_alias(connection, file)
    revision = pair_files.shard_revision(connection, alias)
    return Shard(tables, pair_files.shard_copies(connection, file), revision)


@dataclass(slots=True)
class Facts:
    """The raw rows of one session, and the paths of its folder that rows name, in one snapshot."""

    rows: SessionRows
    folder_paths: set[str]


def session_facts(connection: Connection, session_id: str, tables: StoredTables | None) -> Facts:
    """One session's raw rows; ``tables`` is where its pair is looked for (``None``: no pair)."""
    return _Reader(connection).facts(session_id, tables)


def search_problems(connection: Connection, session_id: str) -> list[Problem]:
    """The search check of one session (:mod:`.search_index`'s rule, in text SQL)."""
    return _Reader(connection).search(session_id)


@dataclass(slots=True)
class Batch:
    """What one snapshot read of many sessions found, by session id."""

    facts: dict[str, Facts]
    search: dict[str, list[Problem]]


def read_batch(
    connection: Connection,
    wanted: list[tuple[str, StoredTables | None]],
    searched: list[str],
) -> Batch:
    """The rows of each ``wanted`` session and the search check of each ``searched`` one."""
    reader = _Reader(connection)
    facts = {sid: reader.facts(sid, tables) for sid, tables in wanted}
    return Batch(facts, {sid: reader.search(sid) for sid in searched})


_GLOBAL = (
    ("session", sessions_table),
    ("agent", agents_table),
    ("run", runs_table),
    ("artifact", artifacts_table),
)
_NAMED = (
    select(artifacts_table.c.path)
    .where(func.substr(artifacts_table.c.path, 1, bindparam("p_len")) == bindparam("p_prefix"))
    .distinct()
)
_INDEXED = select(search_text_table.c.node_id, search_text_table.c.body).where(
    search_text_table.c.session_id == bindparam("p_session")
)


def _named(dialect: Dialect) -> Select[Any]:
    """The paths under a session's folder that artifact rows name.

    Where text compares byte by byte (SQLite's ``BINARY`` collation:
    :attr:`~soong_store.backends.base.Capabilities.orders_text_by_bytes`) those paths are also a
    range of the path index, from the folder's ``sid/`` to ``sid0`` (``0`` follows ``/``): a seek
    instead of a scan of every artifact's path for each session checked. The ``substr`` test
    stays the one that decides.
    """
    if not backend_class(dialect.name).capabilities.orders_text_by_bytes:
        return _NAMED
    path = artifacts_table.c.path
    return _NAMED.where(path >= bindparam("p_prefix"), path < bindparam("p_after"))


@lru_cache(maxsize=4)
def _statements(dialect: Dialect) -> dict[str, Prepared]:
    """The statements over the global tables, compiled once for ``dialect``."""
    out = {
        kind: Prepared.compile(
            select(table).where(table.c.session_id == bindparam("p_session")), dialect
        )
        for kind, table in _GLOBAL
    }
    return {
        **out,
        "named": Prepared.compile(_named(dialect), dialect),
        "indexed": Prepared.compile(_INDEXED, dialect),
    }


def _columns() -> dict[str, tuple[str, ...]]:
    """The factory's columns of a nodes and an events table (as the factory is now)."""
    template = session_tables.session_tables(TEMPLATE)
    return {
        "node": tuple(c.name for c in template.nodes.c),
        "event": tuple(c.name for c in template.events.c),
    }


class _Reader:
    """Reads sessions' rows on one connection by compiled and text statements, on its cursor.

    Building each session's ``Table`` objects and statements (new to every statement cache), and
    even building a ``select`` per session, cost most of a check's time; every column of the
    tables read is plain ``Text`` or ``INTEGER``, so the driver's values are the same.
    """

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.runner = Runner(connection)
        self.statements = _statements(connection.dialect)
        self.quote = connection.dialect.identifier_preparer.quote
        self.columns = _columns()
        self.prefixes: dict[str, str] = {}
        self.copies: dict[str, dict[str, int]] = {}

    def rows(self, prepared: Prepared, **params: Any) -> list[dict[str, Any]]:
        """The rows of ``prepared`` as dicts of column name to value."""
        cursor = self.runner.execute(prepared, params)
        return [dict(zip(prepared.columns, row, strict=True)) for row in cursor.fetchall()]

    def where(self, session_id: str) -> str:
        """The schema prefix of a session's pair where the catalog places it.

        As :func:`~soong_store.catalog.lookup.tables_of` finds it: ``BeforeBegin`` to attach its
        shard, or to look again in a new snapshot when the shard holds no copy of that epoch.
        """
        if session_id in self.prefixes:
            return self.prefixes[session_id]
        place = pair_files.placement(self.connection, session_id)
        prefix = ""
        if place is not None and place[0] != MAIN:
            file, epoch = place
            alias = pair_files.attached_alias(self.connection, file)
            if alias not in self.copies:  # the shard's whole list: one statement, not one each
                self.copies[alias] = pair_files.shard_copies(self.connection, file)
            if self.copies[alias].get(session_id) != epoch:
                why = f"session {session_id} moved out of {file}"
                raise BeforeBegin(pair_files.look_again, why)
            prefix = self.connection.dialect.identifier_preparer.quote_schema(alias) + "."
        self.prefixes[session_id] = prefix
        return prefix

    def pair_rows(
        self, table: str, columns: tuple[str, ...], tail: str = ""
    ) -> list[dict[str, Any]]:
        """``columns`` of the rows of a pair's table (its quoted name with the schema prefix)."""
        listed = ", ".join(self.quote(c) for c in columns)
        return self.rows(Prepared(f"SELECT {listed} FROM {table}{tail}", (), {}, columns))

    def facts(self, session_id: str, tables: StoredTables | None) -> Facts:
        """One session's raw rows (``tables``: where its pair is looked for; ``None``: no pair)."""
        rows = SessionRows(session_id)
        for kind, _ in _GLOBAL:
            rows.rows[kind] = self.rows(self.statements[kind], p_session=session_id)
        if tables is None:  # no pair: what an eager empty pair held (none for a damaged row)
            with suppress(KeyError, TypeError, ValueError):
                rows.rows["event"] = [created_event_row(s) for s in rows.rows["session"]]
        else:
            schema = self.where(session_id)
            names = session_tables.session_table_names(session_id)
            for kind, name, key in zip(("node", "event"), names, ("node_seq", "seq"), strict=True):
                if tables.has(name):
                    table, order = schema + self.quote(name), f" ORDER BY {self.quote(key)}"
                    rows.rows[kind] = self.pair_rows(table, self.columns[kind], order)
        prefix = f"{session_id}/"
        bounds = {"p_len": len(prefix), "p_prefix": prefix, "p_after": f"{session_id}0"}
        named = self.rows(self.statements["named"], **bounds)
        return Facts(rows, {r["path"] for r in named})

    def search(self, session_id: str) -> list[Problem]:
        """The search check of one session: :mod:`soong_store.check.search_index`'s, row for row.

        Every node with text has its index row, holding that text, and no index row names a
        node that is not there; the nodes are read as that module reads them (same order).
        """
        try:
            wanted: dict[str, str] = {}
            if pair_files.placement(self.connection, session_id) is not None:
                nodes = session_tables.session_table_names(session_id)[0]
                table = self.where(session_id) + self.quote(nodes)
                found = self.pair_rows(table, ("node_id", "content_json"))
                wanted = {str(r["node_id"]): node_text(r["content_json"]) for r in found}
        except (SoongStoreError, SQLAlchemyError, ValueError):
            return []  # a bad id, missing tables or damaged content: the rest of the check says so
        indexed = self.rows(self.statements["indexed"], p_session=session_id)
        have = {str(r["node_id"]): str(r["body"]) for r in indexed}
        return compare(session_id, wanted, have)
