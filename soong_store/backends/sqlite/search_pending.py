"""SQLite: the rows of ``search_text`` that FTS5's index has not taken in yet (above a mark).

A lone node's commit would otherwise pay FTS5's whole per-commit write (a new segment, its
structure record, document sizes, a term-index row) for one row. Instead the node's
``search_text`` row is written in its transaction as before, and nothing else: the rows the
index holds are those up to ``search_mark.indexed_upto``, the rows above it wait. The index
takes the waiting rows in by batches (:func:`catch_up`), each batch one segment, as a unit of
work of many nodes does, and moves the mark to the last row:

- in the writer's transaction that brings the rows this writer inserted to :data:`CATCH_UP_AT`;
- before a search that finds rows waiting (the store runs :func:`catch_up` in its writer, then
  searches: every node committed before the search was called is found, ranked as if it had
  been indexed at once, since BM25 reads only the totals of the index);
- before FTS5's ``integrity-check`` (the check compares the index with all of ``search_text``).

A mark rather than a list of waiting rows (revision 0005's ``search_pending``) because a node's
commit then writes no row, page or trigger step of its own for the index. ``doc_id`` is
``search_text``'s rowid, so a new row takes the largest one plus one: above the mark, unless the
rows at the top were deleted after they were taken in, which is why the delete trigger of
:data:`~soong_store.backends.sqlite.search.CREATE` lowers the mark to the largest row left. A row
deleted while waiting leaves ``search_text`` only; one taken in leaves FTS5 too. PostgreSQL's GIN
index is kept by the server: its side of :class:`~soong_store.backends.search.Searcher` does
nothing for these.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

MARK_TABLE: Final = "search_mark"
CATCH_UP_AT: Final = 64
"""Rows a writer inserts before its own transaction takes them into the index."""
_NOTED: Final = "soong_store.search_noted"
"""``connection.info`` key: rows this connection inserted since it last caught up."""

_WAITING: Final = f"FROM search_text WHERE doc_id > (SELECT indexed_upto FROM {MARK_TABLE})"
LAST_ROW: Final = "(SELECT coalesce(max(doc_id), 0) FROM search_text)"
"""The largest ``doc_id`` (0 for none): one step down the rowid tree."""
MOVE_MARK: Final = f"UPDATE {MARK_TABLE} SET indexed_upto = {LAST_ROW}"
"""Every row is in the index (run after the index took them in, in the same transaction)."""
CATCH_UP: Final = (
    f"INSERT INTO search_fts(rowid, body) SELECT doc_id, body {_WAITING} ORDER BY doc_id",
    MOVE_MARK,
)
_BEHIND: Final = f"SELECT 1 {_WAITING} LIMIT 1"
_PROBE: Final = "SELECT rowid FROM search_fts LIMIT 0"
"""Fails to prepare without the index or without FTS5 (it reads nothing)."""


def behind(connection: Connection) -> bool:
    """Whether rows of ``search_text`` wait to enter the index."""
    return connection.exec_driver_sql(_BEHIND).first() is not None


def catch_up(connection: Connection) -> None:
    """Take every waiting row into FTS5's index, in the caller's transaction (one segment)."""
    for statement in CATCH_UP:
        connection.exec_driver_sql(statement)
    connection.info[_NOTED] = 0


def noted(connection: Connection, count: int) -> None:
    """Count ``count`` rows just inserted; at :data:`CATCH_UP_AT`, catch up in this transaction.

    The count is this connection's alone (another process's rows are taken in by whichever
    catch-up comes first); a count that outlives a rolled back transaction only brings the next
    catch-up forward. Without the index, or with a SQLite library without FTS5 on a database
    that has one, rows stay waiting (nothing else of the write needs FTS5) for the next
    catch-up that can run.
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
