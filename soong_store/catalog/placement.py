"""Where each session's pair lives: the catalog's rows, the journal of moves, shards' own table.

Part of the catalog (:mod:`soong_store.catalog.lookup` builds on it and is what callers ask for
a session's tables): ``session_files`` names the file of each pair and the epoch of its copy,
``session_moves`` the moves under way, and each shard file's ``shard_pairs`` the copies it
holds, with their epochs, and its ``shard_revision`` the schema revision its pairs are at
(:mod:`soong_store.migrate.pairs` upgrades a shard and its record in one transaction); a move
fills a shard only if it is this home's and of the main file's shape (:func:`claim_shard`).
A shard is reached under the alias it is attached as on a connection; asking for one
that is not attached raises :class:`~soong_store.backends.values.BeforeBegin`, whose
``prepare`` attaches it. The two ``info`` keys are how units of work tell the writer's
maintenance what they left to do.
"""

from __future__ import annotations

from functools import lru_cache, partial
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    MetaData,
    Table,
    Text,
    bindparam,
    delete,
    inspect,
    select,
)
from sqlalchemy.engine import Dialect

from soong_store.backends.base import ShardFiles, backend_class_of, shard_files_of
from soong_store.backends.link import Link
from soong_store.backends.prepared import Prepared, Runner
from soong_store.backends.sqlite import files as sqlite_files
from soong_store.backends.sqlite.shards import ahead_error, holds_shape_of
from soong_store.backends.values import BeforeBegin
from soong_store.errors import StorageError
from soong_store.schema.tables import INTEGER, session_files_table, session_moves_table

HOT_GREW = "soong_store.hot_grew"
"""Set in a write connection's ``info`` when a pair was created in (or brought back to) the
main database: the writer's maintenance then counts the pairs there."""
JOURNALED = "soong_store.journaled"
"""A write connection's ``info`` entry: the ids of sessions this connection gave a journal row
that the writer's maintenance is to settle (a copy left in a shard by a delete or a move)."""


_MOVE_OF = select(session_moves_table).where(
    session_moves_table.c.session_id == bindparam("p_session")
)


@lru_cache(maxsize=8)
def shard_revision_table(schema: str | None = None) -> Table:
    """A shard's own record of the schema revision its pairs are at (one row)."""
    return Table(
        "shard_revision",
        MetaData(schema=schema),
        Column("revision", Text, primary_key=True),
        sqlite_with_rowid=False,
    )


def shard_revision(connection: Connection, schema: str | None = None) -> str | None:
    """The revision a shard's pairs are at (``None``: a shard from before revisions were kept)."""
    table = shard_revision_table(schema)
    if not inspect(connection).has_table(table.name, schema=schema):
        return None
    found = connection.execute(select(table.c.revision)).scalar()
    return None if found is None else str(found)


def set_shard_revision(connection: Connection, revision: str, schema: str | None = None) -> None:
    """Record the revision a shard's pairs are at, in the caller's transaction of that shard."""
    table = shard_revision_table(schema)
    table.create(connection, checkfirst=True)
    connection.execute(delete(table))
    connection.execute(table.insert(), {"revision": revision})


def stamp_new_shard(connection: Connection, main_as: str) -> None:
    """Give a shard being created the revision of the database that fills it (a move's T1).

    Its pairs are built by this code's table factory, so they have the shape of that revision.
    A shard that already holds pairs keeps its own record.
    """
    if inspect(connection).has_table(shard_pairs().name):
        return
    revision = main_revision(connection, main_as)
    if revision is not None:
        set_shard_revision(connection, revision)


def claim_shard(connection: Connection, main_as: str, file: str) -> None:
    """Check, in a move's T1, that shard ``file`` may take this home's pairs; give it the home id.

    Raises:
        StorageError: the shard is another home's.
        SchemaVersionError: its pairs have another shape (a newer version's upgrade changed it
            and never committed the main database).
    """
    sqlite_files.refuse_foreign(connection, file, main_as)
    _refuse_other_shape(connection, main_as, file)
    sqlite_files.stamp_home(connection, main_as)


def _refuse_other_shape(connection: Connection, main_as: str, file: str) -> None:
    found = shard_revision(connection)
    revision = main_revision(connection, main_as)
    if revision is not None and not holds_shape_of(found, revision):
        raise ahead_error(file, found, revision)


def main_revision(connection: Connection, main_as: str) -> str | None:
    """The revision of the store's database, attached as ``main_as`` to a shard's connection."""
    stored = Table("alembic_version", MetaData(schema=main_as), Column("version_num", Text))
    revision = connection.execute(select(stored.c.version_num)).scalar()
    return None if revision is None else str(revision)


@lru_cache(maxsize=8)
def shard_pairs(schema: str | None = None) -> Table:
    """A shard's own table of the copies it holds: session id and the epoch of the copy."""
    return Table(
        "shard_pairs",
        MetaData(schema=schema),
        Column("session_id", Text, primary_key=True),
        Column("epoch", INTEGER, nullable=False),
        sqlite_with_rowid=False,
    )


@lru_cache(maxsize=8)
def _place_of(dialect: Dialect) -> Prepared:
    return Prepared.lookup(session_files_table, "session_id", dialect)


def placement(connection: Link, session_id: str) -> tuple[str, int] | None:
    """The file and epoch the catalog names for a session's pair (``None``: no pair).

    Prepared, on the driver's cursor: every read and write of a session asks it first.
    """
    row = Runner(connection).first(_place_of(connection.dialect), {"session_id": session_id})
    return None if row is None else (str(row["file"]), int(row["epoch"]))


def move_of(connection: Connection, session_id: str) -> dict[str, Any] | None:
    """The journal row of a move of ``session_id`` under way (``None``: none)."""
    row = connection.execute(_MOVE_OF, {"p_session": session_id}).mappings().first()
    return None if row is None else dict(row)


def copy_epoch(connection: Connection, alias: str, session_id: str) -> int | None:
    """The epoch of the copy of a session's pair the shard attached as ``alias`` holds."""
    table = shard_pairs(alias)
    found = connection.execute(
        select(table.c.epoch).where(table.c.session_id == session_id)
    ).scalar()
    return None if found is None else int(found)


def attach(connection: Connection, file: str) -> None:
    """Attach shard ``file`` to ``connection`` (a ``BeforeBegin``'s preparation).

    A file gone since the catalog was read (the writer's maintenance removes a shard once no
    pair is left in it) is nothing to attach, whether the backend finds it missing or it
    vanishes under the ``ATTACH`` (SQLite then says "disk I/O error"): the next snapshot finds
    the pair where it went. One still named by the catalog is missing or unreadable, and says so.
    """
    try:
        shards_of(connection).attach(connection, file)
    except StorageError as exc:
        if getattr(exc, "file", None) != file or _named(connection, file):
            raise
    except connection.dialect.loaded_dbapi.Error:
        if _named(connection, file):
            raise


def _named(connection: Connection, file: str) -> bool:
    """Whether the catalog names ``file`` now (in a snapshot of its own)."""
    with connection.begin():
        named = select(session_files_table.c.file).where(session_files_table.c.file == file)
        return connection.execute(named.limit(1)).first() is not None


def look_again(connection: Connection) -> None:
    """Nothing to prepare: the next snapshot sees where the pair went."""


def attached_alias(connection: Connection, file: str) -> str:
    """The alias shard ``file`` is attached as (``BeforeBegin`` to attach it first)."""
    alias = shards_of(connection).attached_as(connection, file)
    if alias is None:
        raise BeforeBegin(partial(attach, file=file), f"attach {file}")
    return alias


def shards_of(connection: Connection) -> type[ShardFiles]:
    """The shard part of the connection's backend, where a pair is placed in a shard file.

    Raises:
        StorageError: the backend keeps every pair in its database (no catalog row names a
            shard there).
    """
    found = shard_files_of(connection)
    if found is None:
        title = backend_class_of(connection).title
        raise StorageError(f"{title} keeps every pair in its database")
    return found


def shard_copies(connection: Connection, file: str) -> dict[str, int]:
    """The copies shard ``file`` says it holds (its ``shard_pairs``): epoch by session id."""
    table = shard_pairs(attached_alias(connection, file))
    return {str(sid): int(epoch) for sid, epoch in connection.execute(select(table))}


def placements(connection: Connection, session_id: str | None = None) -> dict[str, tuple[str, int]]:
    """Every session's pair file and epoch, or one session's (sessions without a pair: none)."""
    stmt = select(session_files_table)
    if session_id is not None:
        stmt = stmt.where(session_files_table.c.session_id == session_id)
    rows = connection.execute(stmt)
    return {str(r.session_id): (str(r.file), int(r.epoch)) for r in rows}


def journaled_files(connection: Connection) -> dict[str, set[str]]:
    """For each session with a move under way, the files its journal row names."""
    rows = connection.execute(select(session_moves_table))
    return {str(r.session_id): {str(r.source), str(r.target)} for r in rows}


def note_journaled(connection: Connection, session_id: str) -> None:
    """Ask the writer's maintenance to settle ``session_id``'s journal row once committed."""
    connection.info.setdefault(JOURNALED, set()).add(session_id)
