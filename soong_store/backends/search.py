"""What a search is narrowed to, and how a database answers one: the seam search runs through.

:class:`Searcher` is what ``Backend.searcher()`` returns (SQLite's FTS5 side in
:mod:`~soong_store.backends.sqlite.search`, PostgreSQL's in
:mod:`~soong_store.backends.postgresql.search`); it lives apart from the index's table
(:mod:`~soong_store.search.index`) so that the backends can name it without importing what imports
them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from sqlalchemy import Connection

if TYPE_CHECKING:  # in annotations only: the query parser is loaded by a search
    from soong_store.model.search_query import SearchQuery


@dataclass(frozen=True, slots=True)
class Filters:
    """What a search is narrowed to (``None``: anything)."""

    session_id: str | None = None
    role: str | None = None
    node_type: str | None = None
    agent_type: str | None = None
    owner: str | None = None

    def clause(self, params: dict[str, Any]) -> str:
        """`` AND column = :name`` for each filter given (``t``: search_text, ``a``: agents).

        The values go into ``params``, so a searcher's query only appends the clause. An
        ``owner`` keeps the rows of that owner's sessions (a scoped store's search): filtered in
        the query, so that a page of hits stays full.
        """
        where = ""
        for name, column in _FILTER_COLUMNS:
            value = getattr(self, name)
            if value is not None:
                where += f" AND {column} = :{name}"
                params[name] = str(value)
        if self.owner is not None:
            where += " AND t.session_id IN (SELECT session_id FROM sessions WHERE owner = :owner)"
            params["owner"] = self.owner
        return where


_FILTER_COLUMNS = (
    ("session_id", "t.session_id"),
    ("role", "t.role"),
    ("node_type", "t.node_type"),
    ("agent_type", "a.agent_type"),
)


WINDOW: Final = 5_000
"""How many matches are ranked together: a query's newest ``WINDOW`` matches, then the next.

A search orders its matches window by window: the newest ``WINDOW`` matches that pass the
filters (by ``doc_id``: the order nodes were indexed in), best first, then the ``WINDOW`` before
them, best first, and so on; ``offset`` pages through that order, from one window into the
next. So only a window's rows are ever scored, whatever a common word matches, and a better hit
older than the newest ``WINDOW`` matches comes after them. Every backend windows the same
matches the same way (docs/search.md). Read at each search, so a test may lower it.
"""

Fetch = Callable[[int, int, int | None, int, int], tuple[list[dict[str, Any]], int | None]]
"""``fetch(size, skipped, below, offset, limit)``: a backend's page of one window, and the
window's lowest ``doc_id`` (``None``: the window is empty).

The window is the ``size`` newest matches that pass the filters, after the newest ``skipped``
of them, among those below the ``doc_id`` ``below`` (``None``: all); the page is ``limit`` of
its hits, after ``offset``.
"""


def paged(fetch: Fetch, limit: int, offset: int) -> list[dict[str, Any]]:
    """The hits ``offset`` to ``offset + limit`` in window order, from one window or several.

    A window that gives fewer rows than asked ended there: the next one follows, unless it held
    fewer than :data:`WINDOW` rows (the last: no older match is left). The first window a page
    reaches is found by skipping the matches of the windows before it; each next one starts
    below the last (so a page of many windows walks each match once).
    """
    size = WINDOW
    number, skip = divmod(offset, size)
    skipped, below = number * size, None
    hits: list[dict[str, Any]] = []
    while len(hits) < limit:
        wanted = limit - len(hits)
        rows, low = fetch(size, skipped, below, skip, wanted)
        hits += rows
        if low is None or (len(rows) < wanted and skip + len(rows) < size):
            break
        skipped, below, skip = 0, low, 0
    return hits


class Searcher(Protocol):
    """How one database answers a search over ``search_text`` (``Backend.searcher()``)."""

    def check_ready(self, connection: Connection) -> None:
        """Raise ``StorageError`` saying why this database cannot search, if it cannot."""

    def hits(
        self,
        connection: Connection,
        query: SearchQuery,
        filters: Filters,
        limit: int,
        offset: int,
    ) -> list[dict[str, Any]]:
        """Matching rows by window (:data:`WINDOW`), in each best first, then the newer node.

        On equal scores the newer ``created_at`` first, then the row indexed later. A row holds
        the columns of ``search_text`` but ``doc_id`` and ``body``, the agent's ``agent_type``,
        a ``snippet`` (matched words between ``[`` and ``]``) and a ``rank`` (higher is
        better). ``query`` is never empty.
        """

    def index_problems(self, connection: Connection) -> list[str]:
        """The index's own check against ``search_text``: one line per problem."""

    def noted(self, connection: Connection, count: int) -> None:
        """``count`` rows were just inserted into ``search_text`` in this transaction."""

    def behind(self, connection: Connection) -> bool:
        """Whether rows of ``search_text`` wait to enter the index (a search must not run yet)."""

    def catch_up(self, connection: Connection) -> None:
        """Take every row still waiting into the index, in the caller's transaction."""

    def erase(self, connection: Connection) -> None:
        """Rewrite the index so that no file keeps the words of rows deleted from it."""
