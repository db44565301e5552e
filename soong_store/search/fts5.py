"""Search on SQLite: an FTS5 index over ``search_text`` as external content.

``search_fts`` indexes ``search_text.body`` (its rows are ``search_text.doc_id``) and stores no
copy of the text: snippets and the ``delete`` of a row read it from ``search_text``. Two triggers
keep it in step with every insert into and delete from ``search_text``, in the same transaction;
``search_text`` is never updated. Why external content rather than contentless: the figures are
in ``docs/search.md``.

A SQLite library built without FTS5 still opens, writes and reads every database: revision
0004 then creates ``search_text`` alone, and the first :meth:`FTS5Search.check_ready` says that
search needs FTS5.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import Connection, bindparam, text
from sqlalchemy.exc import DBAPIError, OperationalError

from soong_store.backends.sqlite import SQLiteBackend
from soong_store.errors import StorageError
from soong_store.search.index import Filters
from soong_store.search.query import SearchQuery, fts5_string

FTS_TABLE: Final = "search_fts"
SNIPPET_TOKENS = 12

CREATE: Final = (
    f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(body, content='search_text', "
    "content_rowid='doc_id', tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER search_text_ai AFTER INSERT ON search_text BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, body) VALUES (new.doc_id, new.body); END",
    "CREATE TRIGGER search_text_ad AFTER DELETE ON search_text BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, body) VALUES ('delete', old.doc_id, old.body); "
    "END",
)
"""The index and its triggers (revision 0004 runs these, then :data:`REBUILD`)."""
REBUILD: Final = f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')"
DROP: Final = (
    "DROP TRIGGER IF EXISTS search_text_ad",
    "DROP TRIGGER IF EXISTS search_text_ai",
    f"DROP TABLE IF EXISTS {FTS_TABLE}",
)


def has_fts5(connection: Connection) -> bool:
    """Whether the SQLite library under ``connection`` has FTS5 (it registers ``fts5()``)."""
    try:
        connection.exec_driver_sql("SELECT fts5(NULL)").fetchall()
    except OperationalError:
        return False
    return True


def match_expression(query: SearchQuery) -> str:
    """The FTS5 query of ``query``: every phrase (AND), or the words side by side, ranked higher.

    Each phrase is an FTS5 string, so nothing typed is read as an operator. With several
    phrases, ``(a b) OR "a b"`` matches the same nodes as ``a b`` but BM25 adds the score of the
    whole phrase to the nodes that hold it, which ranks them first.
    """
    every = " ".join(fts5_string(phrase) for phrase in query.phrases)
    together = query.words_in_order
    if together is None:
        return every
    return f"({every}) OR {fts5_string(together)}"


_COLUMNS = """t.doc_id, t.session_id, t.node_id, t.node_seq, t.agent_id, a.agent_type, t.role,
       t.node_type, t.created_at"""
# Unfiltered, the page is picked from FTS5 alone (its own ORDER BY rank, in C), then joined:
# joining every match first costs a lookup in search_text and agents per match.
_TOP = f"""
WITH top AS (
    SELECT rowid AS doc_id, rank AS score FROM search_fts WHERE search_fts MATCH :match
    ORDER BY rank, rowid DESC LIMIT :limit OFFSET :offset
)
SELECT {_COLUMNS}, -top.score AS rank
FROM top JOIN search_text AS t ON t.doc_id = top.doc_id
JOIN agents AS a ON a.agent_id = t.agent_id
ORDER BY top.score, t.doc_id DESC
"""
_FILTERED = f"""
SELECT {_COLUMNS}, -bm25(search_fts) AS rank
FROM search_fts JOIN search_text AS t ON t.doc_id = search_fts.rowid
JOIN agents AS a ON a.agent_id = t.agent_id
WHERE search_fts MATCH :match {{filters}}
ORDER BY bm25(search_fts), t.doc_id DESC
LIMIT :limit OFFSET :offset
"""
# Snippets are made for the page only: in the query above SQLite would make one for every match
# before sorting.
_SNIPPETS = text(
    f"SELECT rowid, snippet(search_fts, 0, '[', ']', '…', {SNIPPET_TOKENS}) FROM search_fts "
    "WHERE search_fts MATCH :match AND rowid IN :ids"
).bindparams(bindparam("ids", expanding=True))


class FTS5Search:
    """The SQLite side of search (:class:`~soong_store.search.index.SearchDialect`)."""

    def check_ready(self, connection: Connection) -> None:
        """Refuse a library without FTS5, or a database upgraded by one (no index built)."""
        if not has_fts5(connection):
            raise StorageError(
                "search needs SQLite's FTS5 extension, which this SQLite library "
                f"({_version(connection)}) was built without: choose another with "
                "sqlite_module= or SOONG_STORE_SQLITE_MODULE (pysqlite3-binary has it)"
            )
        found = connection.exec_driver_sql(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (FTS_TABLE,)
        ).first()
        if found is None:
            raise StorageError(
                f"this database has no {FTS_TABLE} index: it was upgraded by a SQLite library "
                "without FTS5"
            )

    def hits(
        self,
        connection: Connection,
        query: SearchQuery,
        filters: Filters,
        limit: int,
        offset: int,
    ) -> list[dict[str, Any]]:
        """The page of matches (see :class:`~soong_store.search.index.SearchDialect`)."""
        params: dict[str, Any] = {"match": match_expression(query), "limit": limit}
        params["offset"] = offset
        where = filters.clause(params)
        sql = _FILTERED.format(filters=where) if where else _TOP
        found_rows = connection.execute(text(sql), params).mappings()
        rows = [dict(r) for r in found_rows]
        if rows:
            ids = [row["doc_id"] for row in rows]
            found = connection.execute(_SNIPPETS, {"match": params["match"], "ids": ids})
            snippets = {doc_id: snippet for doc_id, snippet in found}
            for row in rows:
                row["snippet"] = snippets.get(row.pop("doc_id"), "")
        return rows

    def index_problems(self, connection: Connection) -> list[str]:
        """FTS5's ``integrity-check`` of the index against ``search_text`` (none without FTS5)."""
        if not has_fts5(connection):
            return []
        try:
            connection.exec_driver_sql(
                f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rank) VALUES ('integrity-check', 1)"
            )
        except DBAPIError as exc:  # SQLite says "malformed": of the index, not of the file
            if SQLiteBackend.is_busy(exc):
                raise
            return [f"FTS5's integrity-check finds {FTS_TABLE} out of step with search_text"]
        return []


def _version(connection: Connection) -> str:
    row = connection.exec_driver_sql("SELECT sqlite_version()").first()
    return f"SQLite {row[0] if row else '?'}"


FTS5: Final = FTS5Search()
