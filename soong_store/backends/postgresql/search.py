"""The PostgreSQL side of search: ``tsvector`` matching over ``search_text`` with a GIN index.

Revision ``0011`` stores each row's ``to_tsvector('simple', body)`` in ``body_vector`` and
indexes that column with GIN: a match the index offers is tested, and a row ranked, on the
stored vector, never on one computed from the text again. Every phrase becomes
``phraseto_tsquery`` (a function of plain text: nothing typed is read as an operator) and all
are AND-ed; with several phrases, the rank of the words side by side in the order typed is
added, so such nodes come first. The matches are ranked window by window, as on SQLite
(:data:`~soong_store.backends.search.WINDOW`).
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import Connection, text

from soong_store.backends.search import Filters, paged
from soong_store.model.search_query import SearchQuery

INDEXED: Final = "to_tsvector('simple', body)"
"""The expression revision 0004's GIN index was on (revision 0011 stores it as ``body_vector``)."""
VECTOR: Final = "t.body_vector"
"""The stored vector, as the queries below read it (revision 0011's GIN index is on it)."""
_BELOW = " AND t.doc_id < :below"
"""A window after the first of a page starts below the one before it."""
_HEADLINE = "StartSel=[, StopSel=], MaxWords=24, MinWords=8, ShortWord=1, HighlightAll=false"


class PostgresSearch:
    """Search on PostgreSQL (:class:`~soong_store.backends.search.Searcher`)."""

    def check_ready(self, connection: Connection) -> None:
        """Nothing to check: full-text search is built into every PostgreSQL."""

    def hits(
        self,
        connection: Connection,
        query: SearchQuery,
        filters: Filters,
        limit: int,
        offset: int,
    ) -> list[dict[str, Any]]:
        """The page of matches window by window, in each best first, the newer node first on ties.

        Per window one statement: the window's ``doc_id``s (the newest matches that pass the
        filters after those of the windows before it), then only those ranked, paged and given
        a snippet: ``ts_rank`` reads each ranked row's text again, so it never sees more than a
        window's rows.
        """
        base: dict[str, Any] = {}
        parts = []
        for index, phrase in enumerate(query.phrases):
            base[f"p{index}"] = phrase
            parts.append(f"phraseto_tsquery('simple', :p{index})")
        match = " && ".join(parts)
        rank = f"ts_rank({VECTOR}, {match})"
        together = query.words_in_order
        if together is not None:
            base["together"] = together
            rank += f" + ts_rank({VECTOR}, phraseto_tsquery('simple', :together))"
        where = filters.clause(base)
        sql = f"""
        WITH window_rows AS (
            SELECT t.doc_id
            FROM search_text AS t JOIN agents AS a ON a.agent_id = t.agent_id
            WHERE {VECTOR} @@ ({match}){where}{{below}}
            ORDER BY t.doc_id DESC LIMIT :size OFFSET :skipped
        ), page AS (
            SELECT t.doc_id, t.session_id, t.node_id, t.node_seq, t.agent_id, a.agent_type,
                   t.role, t.node_type, t.created_at, t.body, {rank} AS rank
            FROM window_rows AS w JOIN search_text AS t ON t.doc_id = w.doc_id
            JOIN agents AS a ON a.agent_id = t.agent_id
            ORDER BY rank DESC, t.created_at DESC, t.doc_id DESC
            LIMIT :limit OFFSET :offset
        )
        SELECT session_id, node_id, node_seq, agent_id, agent_type, role, node_type, created_at,
               rank, ts_headline('simple', body, {match}, '{_HEADLINE}') AS snippet,
               (SELECT min(doc_id) FROM window_rows) AS low
        FROM page ORDER BY rank DESC, created_at DESC, doc_id DESC
        """

        walks = {below: text(sql.format(below=_BELOW if below else "")) for below in (False, True)}

        def fetch(
            size: int, skipped: int, below: int | None, offset: int, limit: int
        ) -> tuple[list[dict[str, Any]], int | None]:
            params = {**base, "size": size, "skipped": skipped, "below": below}
            params.update(limit=limit, offset=offset)
            rows = [
                dict(row) for row in connection.execute(walks[below is not None], params).mappings()
            ]
            low = rows[0]["low"] if rows else None
            for row in rows:
                del row["low"]
            return rows, low

        return paged(fetch, limit, offset)

    def index_problems(self, connection: Connection) -> list[str]:
        """Nothing beyond ``search_text`` itself: the GIN index is the server's to keep."""
        return []

    def noted(self, connection: Connection, count: int) -> None:
        """Nothing to do: the server keeps the GIN index in the rows' own transaction."""

    def behind(self, connection: Connection) -> bool:
        """Never: no row waits to enter the GIN index."""
        return False

    def catch_up(self, connection: Connection) -> None:
        """Nothing to take in."""

    def erase(self, connection: Connection) -> None:
        """Nothing here: a deleted row's index entries go with the row (VACUUM frees both)."""


POSTGRES: Final = PostgresSearch()
