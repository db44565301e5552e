"""A quick look at a SQLite home's sessions with the standard ``sqlite3`` module, no store opened.

``soong-store sessions`` prints one page of sessions and exits. Opening a store for that imports
SQLAlchemy, about half of the ~290 ms the command took at 1,000 sessions. When the home holds a
database the store would open as it is (the file exists, at :data:`~soong_store.home.HEAD_REVISION`,
already in WAL mode), the page is read here by one ``SELECT`` on a driver connection, ordered as
:func:`soong_store.read.record_reads.list_sessions` orders it, and built into records by the
function the store's listing uses. Anything else (no file, another revision or journal mode, a
driver error, a row the records refuse) answers ``None``: the caller opens the store, which
upgrades, switches or reports as it always does. The connection is made with ``mode=rw`` (a missing
file is never created) and ``query_only`` (no statement writes); as any last connection to a WAL
database does, its close copies back a log that another process left (a store's close would).
``mode=ro`` would not, but leaves empty ``-wal`` and ``-shm`` files where there were none: it is for
a file this user may not write, opened as the store opens it
(:func:`~soong_store.home.read_only_params`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from soong_store.errors import SoongStoreError
from soong_store.home import DATABASE_FILE, HEAD_REVISION, read_only_params, writable

if TYPE_CHECKING:
    from soong_store.model.global_records import SessionRecord

_PAGE = "SELECT * FROM sessions{where} ORDER BY updated_at DESC, session_id DESC LIMIT ?"


def sessions_page(home: Path, status: str | None, limit: int) -> list[SessionRecord] | None:
    """The first ``limit`` sessions of ``home`` (of ``status``), newest first; ``None``: ask."""
    path = home / DATABASE_FILE
    if not path.is_file():
        return None
    try:
        opening = {"mode": "rw"} if writable(path) else read_only_params(path)
        query = "&".join(f"{key}={value}" for key, value in opening.items())
        connection = sqlite3.connect(
            f"{path.resolve().as_uri()}?{query}", uri=True, isolation_level=None
        )
    except (sqlite3.Error, SoongStoreError):
        return None
    try:
        connection.execute("PRAGMA query_only = ON")
        as_is = "immutable" in opening  # read as it is on disk: never switched to WAL
        if not as_is and connection.execute("PRAGMA journal_mode").fetchone() != ("wal",):
            return None
        connection.execute("BEGIN")  # the revision and the page from one snapshot
        if connection.execute("SELECT version_num FROM alembic_version").fetchall() != [
            (HEAD_REVISION,)
        ]:
            return None
        params: tuple[object, ...] = (limit,) if status is None else (status, limit)
        cursor = connection.execute(
            _PAGE.format(where="" if status is None else " WHERE status = ?"), params
        )
        names = [column[0] for column in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        connection.execute("COMMIT")
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    from soong_store.model.global_records import session_record

    try:
        return [session_record(row) for row in rows]
    except (ValueError, KeyError, SoongStoreError):  # a row the store reports on: let it
        return None
