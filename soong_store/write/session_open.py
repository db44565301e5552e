"""A session's row for a write, its pair of tables placed first.

What :meth:`~soong_store.write.session_writer.SessionWriter.open` reads before it numbers
anything: the session's write lock, then its row with the current maxima of ``node_seq`` and
``seq``. A session whose pair the catalog does not know yet is looked up in ``session_files``
first: a session never written gets its pair here (:attr:`Loaded.created`: its
``session_created`` event is still to write), one in the main file is remembered, one idle in a
shard file is brought back into the main file, all in the caller's transaction.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import OperationalError

from soong_store.backends.base import backend_class_of, lock_session
from soong_store.backends.prepared import Prepared, Runner, bare_binds
from soong_store.catalog import lookup as catalog
from soong_store.catalog import moves
from soong_store.errors import NotFound, SessionArchived
from soong_store.model.enums import SessionStatus
from soong_store.schema.tables import session_files_table, sessions_table
from soong_store.write.statements import SessionStatements
from soong_store.write.statements import session_statements as _statements


class Loaded(NamedTuple):
    """The session's row (with its maxima), its statements, the runner, and a new pair."""

    row: dict[str, Any]
    sql: SessionStatements
    db: Runner
    created: bool


@lru_cache(maxsize=8)
def _pair_lookup(dialect: Dialect) -> Prepared:
    """:data:`~soong_store.catalog.lookup.PAIR_LOOKUP`, as text where binds are bare (SQLite)."""
    if not bare_binds(dialect):
        return Prepared.compile(catalog.PAIR_LOOKUP, dialect)
    preparer = dialect.identifier_preparer
    sessions = preparer.format_table(sessions_table)
    files = preparer.format_table(session_files_table)
    sid, file = preparer.quote("session_id"), preparer.quote("file")
    sql = (
        f"SELECT {sessions}.{sid}, {files}.{file} FROM {sessions}"
        f" LEFT OUTER JOIN {files} ON {files}.{sid} = {sessions}.{sid}"
        f" WHERE {sessions}.{sid} = :p_session"
    )
    return Prepared.written(sql, dialect, ("session_id", "file"))


def load(connection: Connection, session_id: str, *, writable: bool) -> Loaded:
    """Lock and read the session (``NotFound``); when writing, refuse an archived one."""
    if lock_session(connection, session_id) is False:  # the lock found no row
        raise NotFound(f"no session {session_id!r}", session_id=session_id)
    sql = _statements(session_id, connection.dialect)
    db = Runner(connection)
    engine = connection.engine
    row = None
    if catalog.knows_pair(connection, session_id):
        try:
            row = db.first(sql.session, {"p_session": session_id})
        except OperationalError as exc:
            # Dropped by another process since: ask the catalog (below) what it is now.
            if not backend_class_of(connection).is_missing_table(exc):
                raise
            catalog.forget_pair(engine, session_id)
    created = False
    if row is None:
        found = db.first(_pair_lookup(connection.dialect), {"p_session": session_id})
        if found is None:
            raise NotFound(f"no session {session_id!r}", session_id=session_id)
        if found["file"] is None:
            catalog.create_pair(connection, session_id)
            created = True
        elif found["file"] == catalog.MAIN:
            catalog.remember_pair(engine, session_id)
        else:  # idle in a shard: back to the main file first, in this transaction
            moves.bring_back(connection, session_id)
        row = db.first(sql.session, {"p_session": session_id})
        if row is None:
            raise NotFound(f"no session {session_id!r}", session_id=session_id)
    if writable and row["status"] == SessionStatus.ARCHIVED:
        raise SessionArchived(
            f"session {session_id!r} is archived and takes no writes", session_id=session_id
        )
    return Loaded(row, sql, db, created)
