"""The check of the search index against the nodes it comes from (problem kind ``search_index``).

For each session (:func:`compare`, fed by the whole check's batch reads): every node with text has
its row, holding the text the node gives today, and no row names a node that is not there. For
the whole store also (:func:`whole_problems`): no rows of a session that is gone, and the
backend's own check of its index (FTS5's ``integrity-check``, which SQLite runs as a write
statement, so it runs in the writer and changes nothing).
"""

from __future__ import annotations

from functools import partial

from sqlalchemy import Connection

from soong_store.backends.base import searcher_of
from soong_store.errors import StorageError
from soong_store.rules.session import Problem
from soong_store.search.index import indexed_sessions
from soong_store.store import SessionStore, run_read, run_write

KIND = "search_index"


def compare(session_id: str, wanted: dict[str, str], have: dict[str, str]) -> list[Problem]:
    """The rule: ``wanted`` (each node's text today) against ``have`` (the index's rows)."""
    out = []
    for node_id, body in wanted.items():
        if body and node_id not in have:
            message = f"node {node_id} of session {session_id} is missing from the search index"
            out.append(Problem(KIND, session_id, (node_id,), message))
        elif node_id in have and have[node_id] != body:
            message = f"the search index holds other text for node {node_id} than the node has"
            out.append(Problem(KIND, session_id, (node_id,), message))
    for node_id in sorted(set(have) - set(wanted)):
        message = f"the search index names node {node_id}, which session {session_id} lacks"
        out.append(Problem(KIND, session_id, (node_id,), message))
    return out


def _orphans(connection: Connection, sessions: set[str]) -> list[Problem]:
    return [
        Problem(KIND, sid, (sid,), f"the search index holds rows of session {sid}, which is gone")
        for sid in sorted(set(indexed_sessions(connection)) - sessions)
    ]


def _index_lines(connection: Connection) -> list[str]:
    try:
        searcher = searcher_of(connection)
    except StorageError:  # a backend without search yet has no index of its own to check
        return []
    return searcher.index_problems(connection)


async def whole_problems(store: SessionStore, sessions: list[str]) -> list[Problem]:
    """The index's rows of sessions that are gone (not in ``sessions``), and its own check."""
    out = await run_read(store, partial(_orphans, sessions=set(sessions)))
    try:
        lines = await run_write(store, _index_lines)
    except StorageError as exc:  # a damaged index can fail its own check
        lines = [str(exc)]
    return out + [Problem(KIND, None, (), line) for line in lines]
