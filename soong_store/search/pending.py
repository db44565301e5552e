"""SQLite: the rows of ``search_text`` that FTS5's index has not taken in yet (``search_pending``).

A lone node's commit would otherwise pay FTS5's whole per-commit write (a new segment, its
structure record, document sizes, a term-index row) for one row. Instead the node's
``search_text`` row is written in its transaction as before, and a trigger notes its ``doc_id``
in ``search_pending``; the index takes the noted rows in by batches (:func:`catch_up`), each
batch one segment, as a unit of work of many nodes does:

- in the writer's transaction that brings the rows this writer noted to :data:`CATCH_UP_AT`;
- before a search that finds rows noted (the store runs :func:`catch_up` in its writer, then
  searches: every node committed before the search was called is found, ranked as if it had
  been indexed at once, since BM25 reads only the totals of the index);
- before FTS5's ``integrity-check`` (the check compares the index with all of ``search_text``).

A row deleted while noted leaves the note only; one deleted after it was taken in leaves FTS5
too (the delete trigger of :data:`~soong_store.search.fts5.CREATE`). PostgreSQL's GIN index is
kept by the server: its side of :class:`~soong_store.search.index.SearchDialect` does nothing
for these.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

PENDING_TABLE: Final = "search_pending"
CATCH_UP_AT: Final = 64
"""Rows a writer notes before its own transaction takes them into the index."""
_NOTED: Final = "soong_store.search_noted"
"""``connection.info`` key: rows this connection noted since it last caught up."""

CATCH_UP: Final = (
    "INSERT INTO search_fts(rowid, body) SELECT t.doc_id, t.body FROM search_pending AS p "
    "JOIN search_text AS t ON t.doc_id = p.doc_id ORDER BY p.doc_id",
    "DELETE FROM search_pending",
)
_BEHIND: Final = "SELECT 1 FROM search_pending LIMIT 1"
_PROBE: Final = "SELECT rowid FROM search_fts LIMIT 0"
"""Fails to prepare without the index or without FTS5 (it reads nothing)."""


def behind(connection: Connection) -> bool:
    """Whether rows of ``search_text`` wait to enter the index."""
    return connection.exec_driver_sql(_BEHIND).first() is not None


def catch_up(connection: Connection) -> None:
    """Take every noted row into FTS5's index, in the caller's transaction (one segment)."""
    for statement in CATCH_UP:
        connection.exec_driver_sql(statement)
    connection.info[_NOTED] = 0


def noted(connection: Connection, count: int) -> None:
    """Count ``count`` rows just inserted; at :data:`CATCH_UP_AT`, catch up in this transaction.

    The count is this connection's alone (another process's rows are taken in by whichever
    catch-up comes first); a count that outlives a rolled back transaction only brings the next
    catch-up forward. Without the index, or with a SQLite library without FTS5 on a database
    that has one, rows stay noted (nothing else of the write needs FTS5) for the next catch-up
    that can run.
    """
    seen = connection.info.get(_NOTED, 0) + count
    connection.info[_NOTED] = seen
    if seen < CATCH_UP_AT:
        return
    try:
        connection.exec_driver_sql(_PROBE)
    except OperationalError:
        connection.info[_NOTED] = 0
        return
    catch_up(connection)
