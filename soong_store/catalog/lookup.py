"""The catalog of session tables: which pairs exist and where each lives.

A pair (:mod:`soong_store.schema.session_tables`) is created with the session's first write
(:func:`create_pair`), not with the session: an empty session is two rows. ``session_files`` (a
global table) names the file of every pair that exists, ``main`` for the database itself or a
shard file (``shards/0001.sqlite``) where an idle session's pair was moved
(:mod:`soong_store.catalog.moves`), with the move's epoch; a session without a row has no pair,
and reads answer for it as for an empty session (:func:`tables_of` returns ``None``). A pair in a
shard is read through the shard attached to the connection, and only if the shard's own
``shard_pairs`` holds the copy of exactly the epoch the catalog names (else it moved meanwhile:
the read starts again; the rows and the shards' own table are read by
:mod:`soong_store.catalog.placement`). Callers only ever ask the catalog: for a session's tables,
whether it has them, their names (for a revision over every session), or which session tables
are stored (for the integrity check).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from weakref import WeakKeyDictionary

from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    delete,
    inspect,
    select,
)

from soong_store.backends.base import backend_class_of, shard_files_of
from soong_store.backends.link import Link, engine_connection
from soong_store.backends.values import BeforeBegin
from soong_store.catalog import pair_text
from soong_store.catalog.placement import (
    HOT_GREW,
    attached_alias,
    copy_epoch,
    look_again,
    move_of,
    note_journaled,
    placement,
)
from soong_store.model.checks import check_session_id
from soong_store.schema.session_tables import (
    SessionTables,
    is_session_table,
    rendered_nodes_name,
    session_table_names,
    session_tables,
    table_owner,
)
from soong_store.schema.tables import (
    session_files_table,
    session_moves_table,
    sessions_table,
)

MAIN = "main"
"""The ``session_files.file`` of a pair that lives in the main database."""


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
    fold_case = backend_class_of(connection).capabilities.fold_case
    schema = None if file == MAIN else attached_alias(connection, file)
    found = [n for n in table_names(connection, schema) if is_session_table(n)]
    return StoredTables(found, fold_case=fold_case)


def table_names(connection: Connection, schema: str | None = None) -> list[str]:
    """The tables of the database (or of one schema), leaving out the database's own."""
    return list(inspect(connection).get_table_names(schema=schema))


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

    For reads written as SQL text (:mod:`soong_store.read.climb`): the name alone, found as
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


def create_pair(connection: Connection, session_id: str) -> None:
    """Create a session's pair in the main database and its catalog row (the caller's transaction).

    The pair's DDL is the factory's as text (:func:`.pair_text.create`): running SQLAlchemy's
    DDL path builds and compiles each new session's tables, several times what SQLite spends
    creating them (a cost paid per session by an import of many). Nothing is remembered as
    known before the transaction commits: a rolled-back creation must not make a later write
    skip the catalog.
    """
    pair_text.create(connection, session_id)
    connection.execute(
        session_files_table.insert(), {"session_id": session_id, "file": MAIN, "epoch": 0}
    )
    connection.info[HOT_GREW] = True


def drop_pair(connection: Connection, session_id: str) -> None:
    """Drop a session's pair and its catalog row, if it has them (a pair-less session: no-op).

    A pair in a shard is not dropped here (that would commit a second file): a journal row
    naming its file takes the catalog row's place, and the writer's maintenance drops the copy
    (:func:`soong_store.catalog.moves.recover`). A journal row already there (a move under way)
    stays: with the catalog row gone, recovery drops the pair from both files it names.
    """
    forget_pair(connection.engine, session_id)
    place = placement(connection, session_id)
    # Named in the main database: an unqualified name the main file lacks finds a shard's.
    tables = session_tables(
        session_id, MAIN if backend_class_of(connection).capabilities.places_pairs else None
    )
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
    shards = shard_files_of(connection)
    if shards is not None and shards.attached_files(connection):
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
