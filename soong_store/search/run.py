"""A search as the store runs it: arguments checked, the query read, the backend asked."""

from __future__ import annotations

from sqlalchemy import Connection

from soong_store.backends.base import dialect_of
from soong_store.model.search import SearchHit
from soong_store.search.index import Filters
from soong_store.search.query import SearchQuery


def search(
    connection: Connection, query: SearchQuery, filters: Filters, limit: int, offset: int
) -> list[SearchHit]:
    """The page of hits of ``query`` (one read snapshot); ``StorageError`` if search cannot run.

    Readiness is checked first, also for a query with nothing searchable in it, so that a
    database that cannot search says so at the first call, whatever was asked.
    """
    dialect = dialect_of(connection).search_dialect()
    dialect.check_ready(connection)
    if query.empty:
        return []
    rows = dialect.hits(connection, query, filters, limit, offset)
    return [SearchHit.model_validate(row) for row in rows]
