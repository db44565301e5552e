"""Search on SQLite: an FTS5 index over ``search_text`` as external content.

``search_fts`` indexes ``search_text.body`` (its rows are ``search_text.doc_id``) and stores no
copy of the text: snippets and the ``delete`` of a row read it from ``search_text``. A trigger
takes a deleted row out in the same transaction; ``search_text`` is never updated. Why external
content rather than contentless: the figures are in ``docs/search.md``.

Rows wait above a mark. A lone node's commit would otherwise pay FTS5's whole per-commit write
(a new segment, its structure record, document sizes, a term-index row) for one row. Instead the
node's ``search_text`` row is written in its transaction, and nothing else: the index holds the
rows up to ``search_mark.indexed_upto``, the rows above it wait. The index takes the waiting rows
in by batches (:func:`catch_up`), each batch one segment, and moves the mark to the last row:

- in the writer's transaction that brings the rows this writer inserted to :data:`CATCH_UP_AT`;
- before a search that finds rows waiting (the store runs :func:`catch_up` in its writer, then
  searches: every node committed before the search was called is found, ranked as if it had
  been indexed at once, since BM25 reads only the totals of the index);
- before FTS5's ``integrity-check`` (the check compares the index with all of ``search_text``).

A mark rather than a list of waiting rows (revision 0005's ``search_pending``) because a node's
commit then writes no row, page or trigger step of its own for the index. ``doc_id`` is
``search_text``'s rowid, so a new row takes the largest one plus one: above the mark, unless the
rows at the top were deleted after they were taken in, which is why the delete trigger of
:data:`CREATE` lowers the mark to the largest row left. A row deleted while waiting leaves
``search_text`` only; one taken in leaves FTS5 too. PostgreSQL's GIN index is kept by the
server: its side of :class:`~soong_store.backends.search.Searcher` does nothing for these.

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
from soong_store.backends.search import Filters, paged
from soong_store.errors import StorageError

if TYPE_CHECKING:  # a query is parsed only to search: the writer, which notes rows, needs none
    from soong_store.model.search_query import SearchQuery

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
"""The index, its mark and its trigger (the mark above), as the newest revision has them.

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
    for statement in (*CREATE, REBUILD, MOVE_MARK):
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


_WINDOW = """
SELECT min(doc_id) AS low, max(doc_id) AS high FROM (
    SELECT search_fts.rowid AS doc_id FROM search_fts{joins}
    WHERE search_fts MATCH :match{filters}{below}
    ORDER BY search_fts.rowid DESC LIMIT :size OFFSET :skipped
)
"""
"""The first and last ``doc_id`` of a window: its matches, newest first, that pass the filters.

FTS5 hands the matches over in ``rowid`` order itself (``ORDER BY rowid DESC`` costs no sort)
and scores none of them; with filters each match is joined to its row (``CROSS JOIN`` keeps
FTS5 outside) until the window is full. The matches between the two ids that pass the filters
are exactly the window's.
"""
_BELOW = " AND search_fts.rowid < :below"
"""A window after the first of a page starts below the one before it."""
_ROW = " CROSS JOIN search_text AS t ON t.doc_id = search_fts.rowid"
"""The join every filter needs in the window's walk (the unfiltered walk joins nothing)."""

_PAGE = f"""
SELECT t.session_id, t.node_id, t.node_seq, t.agent_id, a.agent_type, t.role, t.node_type,
       t.created_at, -page.score AS rank,
       snippet(search_fts, 0, '[', ']', '…', {SNIPPET_TOKENS}) AS snippet
FROM (
    SELECT search_fts.rowid AS doc_id, bm25(search_fts) AS score
    FROM search_fts JOIN search_text AS t ON t.doc_id = search_fts.rowid{{agents}}
    WHERE search_fts MATCH :match AND search_fts.rowid BETWEEN :low AND :high{{filters}}
    ORDER BY score, t.created_at DESC, t.doc_id DESC
    LIMIT :limit OFFSET :offset
) AS page
CROSS JOIN search_text AS t CROSS JOIN agents AS a CROSS JOIN search_fts
WHERE t.doc_id = page.doc_id AND a.agent_id = t.agent_id
  AND search_fts MATCH :match AND search_fts.rowid = page.doc_id
ORDER BY page.score, t.created_at DESC, t.doc_id DESC
"""
"""A page of one window's hits, ordered and cut by the database, whatever ties.

The inner query scores the window's matches only (BM25 has no shortcut to the best rows: FTS5
scores every row it is given, so the window's bounds are given as a ``rowid`` range) and orders
by score, then the newer node (its own time: imports keep the source's), then the row indexed
later; its ``LIMIT``/``OFFSET`` lets SQLite keep only ``limit + offset`` rows while it sorts. A
run of equal scores of any length costs a row lookup each, never a bound variable. BM25 still
reads how many rows hold each phrase in the whole index (one pass over each phrase's list of
rows, no scoring). Only the page's rows are then joined to their columns, agent and snippet
(``CROSS JOIN`` keeps that order: FTS5 looks each row up by ``rowid``, rather than scanning
every match).
"""
_AGENTS = " JOIN agents AS a ON a.agent_id = t.agent_id"
"""The join the ``agent_type`` filter needs in the inner query (no other filter does)."""
_WINDOW_AGENTS = " CROSS JOIN agents AS a ON a.agent_id = t.agent_id"
# A session's rows lie between its first and last doc_id: FTS5 walks only the matches in that
# range (a search in one session costs what its range holds, not what the whole index holds).
_SESSION_RANGE = (
    " AND search_fts.rowid BETWEEN"
    " (SELECT min(doc_id) FROM search_text WHERE session_id = :session_id)"
    " AND (SELECT max(doc_id) FROM search_text WHERE session_id = :session_id)"
)


class FTS5Search:
    """The SQLite side of search (:class:`~soong_store.backends.search.Searcher`)."""

    def check_ready(self, connection: Connection) -> None:
        """Refuse a library without FTS5, or a database upgraded by one (no index built).

        Any other failure of the probe (the table is there) is raised as it is.
        """
        try:
            connection.exec_driver_sql(_PROBE)
        except OperationalError as exc:
            if backend_class_of(connection).is_transient(exc) or _has_table(connection, FTS_TABLE):
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
        """The page of matches (see :class:`~soong_store.backends.search.Searcher`).

        Per window two statements: its bounds (:data:`_WINDOW`), then its page (:data:`_PAGE`).
        """
        base: dict[str, Any] = {"match": match_expression(query)}
        where = filters.clause(base)
        walked = where
        joins = ""
        if where:
            joins = _ROW + (_WINDOW_AGENTS if filters.agent_type is not None else "")
        if filters.session_id is not None:
            walked += _SESSION_RANGE
        walks = {
            below: text(_WINDOW.format(joins=joins, filters=walked, below=_BELOW if below else ""))
            for below in (False, True)
        }
        agents = _AGENTS if filters.agent_type is not None else ""
        page = text(_PAGE.format(agents=agents, filters=where))

        def fetch(
            size: int, skipped: int, below: int | None, offset: int, limit: int
        ) -> tuple[list[dict[str, Any]], int | None]:
            params = {**base, "size": size, "skipped": skipped, "below": below}
            low, high = connection.execute(walks[below is not None], params).one()
            if low is None:
                return [], None
            params.update(low=low, high=high, limit=limit, offset=offset)
            rows = [dict(row) for row in connection.execute(page, params).mappings()]
            return rows, int(low)

        return paged(fetch, limit, offset)

    def index_problems(self, connection: Connection) -> list[str]:
        """FTS5's ``integrity-check`` of the index against ``search_text`` (none without FTS5).

        The rows waiting are taken in first: the check compares the index
        with every row of ``search_text``.
        """
        if not has_fts5(connection):
            return []
        try:
            catch_up(connection)
            connection.exec_driver_sql(
                f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rank) VALUES ('integrity-check', 1)"
            )
        except DBAPIError as exc:  # SQLite says "malformed": of the index, not of the file
            if backend_class_of(connection).is_busy(exc):
                raise
            return [f"FTS5's integrity-check finds {FTS_TABLE} out of step with search_text"]
        return []

    def noted(self, connection: Connection, count: int) -> None:
        """Rows were inserted: at enough of them, take them into the index (the mark above)."""
        noted(connection, count)

    def behind(self, connection: Connection) -> bool:
        """Whether ``search_text`` has rows above the index's mark."""
        return behind(connection)

    def catch_up(self, connection: Connection) -> None:
        """Take the waiting rows into the index in one statement (one segment)."""
        catch_up(connection)

    def erase(self, connection: Connection) -> None:
        """FTS5's ``optimize``: every segment merged into one, deleted rows' entries left out.

        A row deleted from FTS5's index is only marked deleted in a newer segment; its words
        stay in the older segments until a merge drops them. ``optimize`` merges them all, and
        with ``secure_delete`` the pages of the old segments are zeroed as they are freed.
        FTS5's own ``secure-delete`` option would avoid the rewrite, but once set it marks the
        index with a format that FTS5 before SQLite 3.42 refuses to read, and a store's file
        is opened by the older libraries of the matrix too. Without FTS5 there is no index.
        """
        if not _has_table(connection, FTS_TABLE) or not has_fts5(connection):
            return
        connection.exec_driver_sql(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('optimize')")


def _version(connection: Connection) -> str:
    row = connection.exec_driver_sql("SELECT sqlite_version()").first()
    return f"SQLite {row[0] if row else '?'}"


FTS5: Final = FTS5Search()
