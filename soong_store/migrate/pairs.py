"""Per-session schema changes wherever the pairs live: the main database and every shard file.

A revision that changes the per-session tables calls :func:`upgrade_pairs` with a change: a callable
given a connection whose main database is one file, and the ids of the sessions whose tables that
file holds. The main database's pairs change in the revision's own transaction. On SQLite every
shard file then changes in a transaction of its own, which also records in the shard (its
``shard_revision``) the revision its pairs are now at: a crash part way leaves each shard wholly in
one shape, named by its record, and the main database at the revision before; the next upgrade
changes only the shards whose record is older. Before the first shard changes, the upgrade's
revision is written to the mark that keeps code which stops at the main database's revision from
opening the home (:mod:`soong_store.backends.sqlite.shards`). Shards created later start at the
revision of the database that fills them (``docs/scaling.md``, per-session upgrades).

:func:`add_column` is the change for the common case, a nullable column without a default: on
SQLite it rewrites each table's ``CREATE TABLE`` text to what ``ALTER TABLE ... ADD COLUMN``
itself writes (:mod:`soong_store.backends.sqlite.alter`), since one ``ALTER`` per table re-reads
the whole file's schema each time (22 s for a shard of 500 pairs, against well under a second
for the rewrite).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Literal, cast

from sqlalchemy import Connection, Engine, select

from soong_store.backends.base import backend_class_of
from soong_store.backends.sqlite import files as sqlite_files
from soong_store.backends.sqlite.backend import make_engine
from soong_store.backends.sqlite.shards import ahead_error, ancestors, known, write_mark
from soong_store.catalog.lookup import table_names
from soong_store.catalog.placement import set_shard_revision, shard_revision
from soong_store.errors import InvalidArgument
from soong_store.model.checks import check_session_id
from soong_store.schema.session_tables import EVENTS_PREFIX, NODES_PREFIX, table_owner
from soong_store.schema.tables import shard_files_table

PairChange = Callable[[Connection, list[str]], None]
"""A change applied to one file's pairs: its connection, and the ids of the sessions there."""

COLUMN_TYPES = ("INTEGER", "TEXT", "REAL", "BLOB")
"""The column types :func:`add_column` takes (each means the same on SQLite and PostgreSQL)."""

MIGRATION_LOGGER = "alembic.runtime.migration"
"""Alembic's logger of migrations, which ``alembic upgrade`` prints and progress is logged to."""

_log = logging.getLogger(MIGRATION_LOGGER)
_COLUMN = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def stored_session_ids(connection: Connection) -> list[str]:
    """The ids of the sessions with a ``nodes_``/``events_`` table in the connection's database."""
    owners = {table_owner(name) for name in table_names(connection) if name}
    return sorted(check_session_id(owner) for owner in owners if owner is not None)


def upgrade_pairs(connection: Connection, revision: str, change: PairChange) -> None:
    """Apply ``change`` to every session's pair, in the main database and in every shard.

    Call it from a revision's ``upgrade()`` with that revision's id::

        upgrade_pairs(op.get_bind(), revision, add_column("nodes", "flags", "INTEGER"))

    Progress is logged per shard (Alembic's logger, which ``alembic upgrade`` prints).

    Raises:
        StorageError: a shard file could not be upgraded; the shards done before it stay
            done (each with its record), the main database's transaction is the caller's.
        SchemaVersionError: a shard is at a revision this code does not know.
    """
    started = time.perf_counter()
    change(connection, stored_session_ids(connection))
    if not backend_class_of(connection).capabilities.places_pairs:
        return
    database = sqlite_files.folder(connection)
    files = shard_file_names(connection, database)
    if files:
        write_mark(database, revision)
    for number, file in enumerate(files, 1):
        done = _upgrade_shard(connection, database, file, revision, change)
        _log.info(
            "per-session change %s: shard %d of %d (%s) %s, %.1f s",
            revision,
            number,
            len(files),
            file,
            "changed" if done else "already done",
            time.perf_counter() - started,
        )


def shard_file_names(connection: Connection, database: Path) -> list[str]:
    """Every shard file: those the catalog lists and those on disk (a move's T1 may leave one).

    Links on disk are listed too, so that the upgrade meets them and refuses them.
    """
    listed = set(connection.execute(select(shard_files_table.c.file)).scalars())
    return sorted(listed | set(sqlite_files.files_on_disk(database, links=True)))


def _upgrade_shard(
    connection: Connection, database: Path, file: str, revision: str, change: PairChange
) -> bool:
    """One shard's change and record in one transaction of it; whether it needed the change."""
    path = sqlite_files.shard_path(database, file)  # never through a link
    engine = _shard_engine(connection, path)
    try:
        with engine.connect() as shard, shard.begin():
            if not _behind(file, shard_revision(shard), revision):
                return False
            change(shard, stored_session_ids(shard))
            set_shard_revision(shard, revision)
        return True
    finally:
        engine.dispose()


def _shard_engine(connection: Connection, path: Path) -> Engine:
    """An engine on the shard file ``path``, with the driver module of ``connection``."""
    module = cast(ModuleType, connection.dialect.loaded_dbapi)
    return make_engine(f"sqlite:///{path}", "admin", sqlite_module=module)


def _behind(file: str, marker: str | None, revision: str) -> bool:
    """Whether a shard recorded at ``marker`` lacks ``revision`` (its marker is an ancestor).

    A marker past ``revision`` that this code knows is a later revision of the same run, done
    already; one it does not know is refused.
    """
    if marker is None:
        return True
    if marker == revision:
        return False
    if marker in ancestors(revision):
        return True
    if known(marker):
        return False
    raise ahead_error(file, marker, revision)


def add_column(kind: Literal["nodes", "events"], column: str, type_: str = "INTEGER") -> PairChange:
    """The change that adds a nullable column without a default to every ``kind`` table.

    Such a column changes no stored row (a row stored without it reads NULL there), only each
    table's ``CREATE TABLE`` text; on SQLite that text is written directly (see the module
    docstring), elsewhere by ``ALTER TABLE ... ADD COLUMN``.

    Raises:
        InvalidArgument: ``kind``, ``column`` or ``type_`` is not one this helper takes.
    """
    if kind not in ("nodes", "events"):
        raise InvalidArgument(f"kind must be 'nodes' or 'events', not {kind!r}")
    if not _COLUMN.match(column):
        raise InvalidArgument(f"column name {column!r} is not a lower-case SQL identifier")
    if type_ not in COLUMN_TYPES:
        raise InvalidArgument(f"column type {type_!r} is not one of {', '.join(COLUMN_TYPES)}")
    prefix = NODES_PREFIX if kind == "nodes" else EVENTS_PREFIX
    definition = f'"{column}" {type_}'

    def change(connection: Connection, session_ids: list[str]) -> None:
        backend_class_of(connection).add_column(
            connection, {prefix + sid for sid in session_ids}, definition
        )

    return change
