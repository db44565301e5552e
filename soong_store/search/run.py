"""A search as the store runs it: arguments checked, the query read, the backend asked."""

from __future__ import annotations

from sqlalchemy import Connection

from soong_store.backends.base import searcher_of
from soong_store.backends.search import Filters
from soong_store.errors import SoongStoreError
from soong_store.model.search import SearchHit
from soong_store.model.search_query import SearchQuery


class IndexBehind(SoongStoreError):
    """Rows wait to enter the full-text index: the store's writer takes them in, then it searches.

    Never reaches a caller of ``store.search``.
    """


def search(
    connection: Connection,
    query: SearchQuery,
    filters: Filters,
    limit: int,
    offset: int,
    *,
    caught_up: bool = False,
) -> list[SearchHit]:
    """The page of hits of ``query`` (one read snapshot); ``StorageError`` if search cannot run.

    Readiness is checked first, also for a query with nothing searchable in it, so that a
    database that cannot search says so at the first call, whatever was asked. Rows not yet in
    the index raise :class:`IndexBehind`, unless ``caught_up``: the writer has just taken them
    in, and rows noted since are of writes that came after the search was called.
    """
    searcher = searcher_of(connection)
    searcher.check_ready(connection)
    if query.empty:
        return []
    if not caught_up and searcher.behind(connection):
        raise IndexBehind("the search index has rows to take in first")
    rows = searcher.hits(connection, query, filters, limit, offset)
    return [SearchHit.model_validate(row) for row in rows]


def catch_up(connection: Connection) -> None:
    """The writer job that takes the rows waiting for the index in (before a search runs)."""
    searcher_of(connection).catch_up(connection)
