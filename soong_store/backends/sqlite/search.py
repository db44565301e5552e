"""Search on SQLite: an FTS5 index over ``search_text`` as external content.

``search_fts`` indexes ``search_text.body`` (its rows are ``search_text.doc_id``) and stores no copy
of the text: snippets and the ``delete`` of a row read it from ``search_text``. The rows above the
mark in ``search_mark`` wait for the index, which takes them in by batches before any search or
check reads it (:mod:`~soong_store.backends.sqlite.search_pending`); a trigger takes a deleted row
out in the same transaction. ``search_text`` is never updated. Why external content rather than
contentless: the figures are in ``docs/search.md``.

A SQLite library built without FTS5 still opens, writes and reads every database: revision
0004 then creates ``search_text`` alone, and the first :meth:`FTS5Search.check_ready` says that
search needs FTS5. Such a database, opened later with a library that has FTS5, gets its index
from ``soong-store upgrade`` (:func:`build_missing_index`), which the search error names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError, OperationalError

from soong_store.backends.base import backend_class_of
from soong_store.backends.search import Filters
from soong_store.backends.sqlite import search_pending as pending
from soong_store.backends.sqlite.search_pending import LAST_ROW, MARK_TABLE
from soong_store.errors import StorageError

if TYPE_CHECKING:  # a query is parsed only to search: the writer, which notes rows, needs none
    from soong_store.model.search_query import SearchQuery

FTS_TABLE: Final = "search_fts"
SNIPPET_TOKENS = 12

TABLE: Final = (
    f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(body, content='search_text', "
    "content_rowid='doc_id', tokenize='unicode61 remove_diacritics 2')"
)
"""The index itself (every revision's shape has it as revision 0004 created it)."""
TRIGGERS: Final = (
    "CREATE TRIGGER search_text_ad AFTER DELETE ON search_text BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, body) SELECT 'delete', old.doc_id, old.body "
    f"FROM {MARK_TABLE} WHERE old.doc_id <= indexed_upto; "
    f"UPDATE {MARK_TABLE} SET indexed_upto = {LAST_ROW} WHERE indexed_upto > {LAST_ROW}; END",
)
MARK: Final = (
    f"CREATE TABLE {MARK_TABLE} (indexed_upto INTEGER NOT NULL)",
    f"INSERT INTO {MARK_TABLE}(indexed_upto) VALUES (0)",
)
CREATE: Final = (TABLE, *MARK, *TRIGGERS)
"""The index, its mark and its trigger (:mod:`.pending`), as the newest revision has them.

No trigger on insert: a row above the mark waits. A delete takes the row out of the index if
it was taken in (external content: FTS5 deletes by the text it indexed, which ``old.body``
still is), then keeps the mark at or below the largest row left, so that a new row, which takes
the largest ``doc_id`` plus one, lands above it. Revision 0006 brings 0005's shape to this one
with its own copy of these statements, so a later revision may change them here.
"""
REBUILD: Final = f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')"
DROP: Final = (
    "DROP TRIGGER IF EXISTS search_text_ad",
    "DROP TRIGGER IF EXISTS search_text_ai",
    f"DROP TABLE IF EXISTS {MARK_TABLE}",
    "DROP TABLE IF EXISTS search_pending",
    f"DROP TABLE IF EXISTS {FTS_TABLE}",
)
UPGRADE_HINT: Final = "soong-store upgrade"
"""The command that builds a missing index (it runs :func:`build_missing_index`)."""

# Preparing it fails without the table or without FTS5; it reads nothing. (A query of
# sqlite_master would scan a row per session table: tens of milliseconds at 10,000 sessions.)
_PROBE: Final = f"SELECT rowid FROM {FTS_TABLE} LIMIT 0"


def has_fts5(connection: Connection) -> bool:
    """Whether the SQLite library under ``connection`` has FTS5 (it registers ``fts5()``)."""
    try:
        connection.exec_driver_sql("SELECT fts5(NULL)").fetchall()
    except OperationalError:
        return False
    return True


def _has_table(connection: Connection, name: str) -> bool:
    found = connection.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).first()
    return found is not None


def build_missing_index(connection: Connection) -> bool:
    """Create and fill ``search_fts`` where ``search_text`` has none; whether it did.

    A database upgraded by a library without FTS5 has ``search_text`` (filled by every write
    since) and no index; with a library that has FTS5 this builds it in one ``rebuild`` over the
    table, in the caller's transaction. Nothing on other databases or without FTS5.
    """
    if connection.dialect.name != "sqlite" or not has_fts5(connection):
        return False
    if _has_table(connection, FTS_TABLE) or not _has_table(connection, "search_text"):
        return False
    for statement in (*CREATE, REBUILD, pending.MOVE_MARK):
        connection.exec_driver_sql(statement)
    return True


def index_missing(engine: Engine) -> bool:
    """Whether :func:`build_missing_index` would build an index (asked without any lock)."""
    if engine.dialect.name != "sqlite":
        return False
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        try:
            cursor.execute(_PROBE)
        except engine.dialect.loaded_dbapi.OperationalError:
            cursor.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_text'")
            return cursor.fetchone() is not None and _raw_has_fts5(cursor, engine)
        finally:
            cursor.close()
    finally:
        raw.close()
    return False


def _raw_has_fts5(cursor: Any, engine: Engine) -> bool:
    try:
        cursor.execute("SELECT fts5(NULL)")
    except engine.dialect.loaded_dbapi.OperationalError:
        return False
    return True


def match_expression(query: SearchQuery) -> str:
    """The FTS5 query of ``query``: every phrase (AND), or the words side by side, ranked higher.

    Each phrase is an FTS5 string, so nothing typed is read as an operator. With several
    phrases, ``(a b) OR "a b"`` matches the same nodes as ``a b`` but BM25 adds the score of the
    whole phrase to the nodes that hold it, which ranks them first.
    """
    from soong_store.model.search_query import fts5_string

    every = " ".join(fts5_string(phrase) for phrase in query.phrases)
    together = query.words_in_order
    if together is None:
        return every
    return f"({every}) OR {fts5_string(together)}"


_PAGE = f"""
SELECT t.session_id, t.node_id, t.node_seq, t.agent_id, a.agent_type, t.role, t.node_type,
       t.created_at, -page.score AS rank,
       snippet(search_fts, 0, '[', ']', '…', {SNIPPET_TOKENS}) AS snippet
FROM (
    SELECT search_fts.rowid AS doc_id, bm25(search_fts) AS score
    FROM search_fts JOIN search_text AS t ON t.doc_id = search_fts.rowid{{agents}}
    WHERE search_fts MATCH :match{{filters}}
    ORDER BY score, t.created_at DESC, t.doc_id DESC
    LIMIT :limit OFFSET :offset
) AS page
CROSS JOIN search_text AS t CROSS JOIN agents AS a CROSS JOIN search_fts
WHERE t.doc_id = page.doc_id AND a.agent_id = t.agent_id
  AND search_fts MATCH :match AND search_fts.rowid = page.doc_id
ORDER BY page.score, t.created_at DESC, t.doc_id DESC
"""
"""A page of hits in one statement, ordered and cut by the database, whatever ties.

The inner query scores every match (BM25 has no shortcut to the best rows: FTS5's own ``ORDER
BY rank`` scores them all too) and orders by score, then the newer node (its own time: imports
keep the source's), then the row indexed later; its ``LIMIT``/``OFFSET`` lets SQLite keep only
``limit + offset`` rows while it sorts. A run of equal scores of any length (a thousand nodes
that say "continue") costs a row lookup each, never a bound variable.
Only the page's rows are then joined to their columns, agent and snippet (``CROSS JOIN``
keeps that order: FTS5 looks each row up by ``rowid``, rather than scanning every match).
"""
_AGENTS = " JOIN agents AS a ON a.agent_id = t.agent_id"
"""The join the ``agent_type`` filter needs in the inner query (no other filter does)."""
# A session's rows lie between its first and last doc_id: FTS5 scores only the matches in that
# range (a search in one session costs what its range holds, not what the whole index holds).
_SESSION_RANGE = (
    " AND search_fts.rowid BETWEEN"
    " (SELECT min(doc_id) FROM search_text WHERE session_id = :session_id)"
    " AND (SELECT max(doc_id) FROM search_text WHERE session_id = :session_id)"
)


class FTS5Search:
    """The SQLite side of search (:class:`~soong_store.backends.search.Searcher`)."""

    def check_ready(self, connection: Connection) -> None:
        """Refuse a library without FTS5, or a database upgraded by one (no index built)."""
        try:
            connection.exec_driver_sql(_PROBE)
        except OperationalError as exc:
            if backend_class_of(connection).is_transient(exc):
                raise
            if not has_fts5(connection):
                raise StorageError(
                    "search needs SQLite's FTS5 extension, which this SQLite library "
                    f"({_version(connection)}) was built without: choose another with "
                    "sqlite_module= or SOONG_STORE_SQLITE_MODULE (pysqlite3-binary has it)"
                ) from None
            raise StorageError(
                f"this database has no {FTS_TABLE} index: it was upgraded by a SQLite library "
                f"without FTS5; build it with `{UPGRADE_HINT}` (or soong_store.upgrade) "
                "using a library that has FTS5"
            ) from None

    def hits(
        self,
        connection: Connection,
        query: SearchQuery,
        filters: Filters,
        limit: int,
        offset: int,
    ) -> list[dict[str, Any]]:
        """The page of matches (see :class:`~soong_store.backends.search.Searcher`)."""
        match = match_expression(query)
        params: dict[str, Any] = {"match": match, "limit": limit, "offset": offset}
        where = filters.clause(params)
        if filters.session_id is not None:
            where += _SESSION_RANGE
        agents = _AGENTS if filters.agent_type is not None else ""
        sql = text(_PAGE.format(agents=agents, filters=where))
        return [dict(row) for row in connection.execute(sql, params).mappings()]

    def index_problems(self, connection: Connection) -> list[str]:
        """FTS5's ``integrity-check`` of the index against ``search_text`` (none without FTS5).

        The rows waiting are taken in first: the check compares the index
        with every row of ``search_text``.
        """
        if not has_fts5(connection):
            return []
        try:
            pending.catch_up(connection)
            connection.exec_driver_sql(
                f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rank) VALUES ('integrity-check', 1)"
            )
        except DBAPIError as exc:  # SQLite says "malformed": of the index, not of the file
            if backend_class_of(connection).is_busy(exc):
                raise
            return [f"FTS5's integrity-check finds {FTS_TABLE} out of step with search_text"]
        return []

    def noted(self, connection: Connection, count: int) -> None:
        """Rows were inserted: at enough of them, take them into the index (:mod:`.pending`)."""
        pending.noted(connection, count)

    def behind(self, connection: Connection) -> bool:
        """Whether ``search_text`` has rows above the index's mark."""
        return pending.behind(connection)

    def catch_up(self, connection: Connection) -> None:
        """Take the waiting rows into the index in one statement (one segment)."""
        pending.catch_up(connection)


def _version(connection: Connection) -> str:
    row = connection.exec_driver_sql("SELECT sqlite_version()").first()
    return f"SQLite {row[0] if row else '?'}"


FTS5: Final = FTS5Search()
