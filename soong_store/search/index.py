"""The global search table: one row of indexed text per node, kept with the node it comes from.

``search_text`` lives in the main database whatever file a session's own tables live in, and
names each node by ``(session_id, node_id)``; it holds the text :func:`~soong_store.search.index.
node_text` finds and what a hit shows without opening the session (sequence, agent, role,
type, time). It is written in the transaction of the node (:func:`search_row` for every node the
session writer inserts, live, imported or forked, and :func:`index_rows` for all of a
transaction's rows at once, before it commits) and emptied of a session in
the transaction that deletes it (:func:`unindex_session`), of a node in the one that redacts
it (:func:`unindex_node`). A node without text gets no row; a redacted node has none.

Its table is the backend's, not Alembic's models': revision 0004 creates it with what the
backend adds over it (SQLite: an FTS5 index reading it as external content, kept by triggers),
so autogenerate skips every table named ``search_*`` (:func:`is_search_table`). How a query runs
is the backend's (:class:`~soong_store.backends.search.Searcher`, from
:func:`~soong_store.backends.base.searcher_of`).

The text: the searchable text of a node is what its content blocks say, never an artifact's bytes.

Indexed: the text of text blocks; a tool call's name and the values of its arguments; what a
tool result holds (its text, its inline JSON values, the summaries of its JSON and artifact
items); a JSON block's inline values and summary; an artifact reference's summary. JSON keys,
ids, MIME types and artifact bodies are not. One function serves the write path, the backfill
of an older database and the check, so the three always agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import orjson
from sqlalchemy import (
    Column,
    Connection,
    Integer,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    delete,
    select,
)
from sqlalchemy.engine import Dialect

from soong_store.backends.base import searcher_of
from soong_store.backends.prepared import LARGE_VALUE, Prepared, Runner

SEARCH_PREFIX = "search_"

search_text_table = Table(
    "search_text",
    MetaData(),
    Column("doc_id", Integer, primary_key=True),
    Column("session_id", Text, nullable=False),
    Column("node_id", Text, nullable=False),
    Column("node_seq", Integer, nullable=False),
    Column("agent_id", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("node_type", Text, nullable=False),
    Column("created_at", Text, nullable=False),
    Column("body", Text, nullable=False),
    UniqueConstraint("session_id", "node_id", name="uq_search_text_session_node"),
)
"""The indexed text of every node (``doc_id`` is the full-text index's row id)."""

_COLUMNS = [c.name for c in search_text_table.c if c.name != "doc_id"]


def is_search_table(name: str) -> bool:
    """Whether a table belongs to the search index (so that Alembic's autogenerate skips it)."""
    return name.startswith(SEARCH_PREFIX)


_INSERTED = ("body", *_COLUMNS[:-1])
"""The columns in the order the insert binds them: the text first, so that it is released."""


@lru_cache(maxsize=8)
def _insert(dialect: Dialect) -> Prepared:
    return Prepared.insert(search_text_table, dialect, _INSERTED)


def search_row(session_id: str, row: dict[str, Any]) -> dict[str, Any] | None:
    """The ``search_text`` row of a node row being inserted (``None``: the node has no text)."""
    body = node_text(row["content_json"])
    if not body:
        return None
    values = {name: row[name] for name in _COLUMNS[1:-1]}
    return {**values, "session_id": session_id, "body": body}


def index_rows(db: Runner, connection: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert the :func:`search_row` rows of a transaction's nodes, in that transaction.

    One driver call for them all, a one-row insert bound again for each: an insert of many rows
    in one statement is compiled again for each number of rows, which cost SQLite four times
    the rows' own insert where transactions end with a different number (an import's do). On
    SQLite the rows wait above FTS5's mark and are taken into its index by batches
    (:mod:`~soong_store.backends.sqlite.search`), so that a lone node's commit does not
    write a segment of FTS5's index of its own.
    """
    insert = _insert(connection.dialect)
    db.executemany(insert, rows)
    if rows and len(rows[-1]["body"]) >= LARGE_VALUE:
        db.release(insert)  # SQLite would hold the long text until the statement runs again
    searcher_of(connection).noted(connection, len(rows))


def unindex_session(connection: Connection, session_id: str) -> None:
    """Remove a session's rows from the index (in the transaction that deletes the session)."""
    table = search_text_table
    connection.execute(delete(table).where(table.c.session_id == session_id))


def unindex_node(connection: Connection, session_id: str, node_id: str) -> None:
    """Remove one node's row from the index (in the transaction that redacts it)."""
    table = search_text_table
    connection.execute(
        delete(table).where(table.c.session_id == session_id, table.c.node_id == node_id)
    )


def indexed_bodies(connection: Connection, session_id: str) -> dict[str, str]:
    """What the index holds of a session: node id to indexed text."""
    table = search_text_table
    stmt = select(table.c.node_id, table.c.body).where(table.c.session_id == session_id)
    return {str(node_id): str(body) for node_id, body in connection.execute(stmt)}


def indexed_sessions(connection: Connection) -> list[str]:
    """Every session id the index holds rows of."""
    column = search_text_table.c.session_id
    return [str(sid) for sid in connection.execute(select(column).distinct()).scalars()]


_SEPARATOR = "\n"


def node_text(content_json: str | bytes) -> str:
    """The searchable text of a node's stored ``content_json`` (empty when it says nothing)."""
    blocks = orjson.loads(content_json)
    if not isinstance(blocks, list):
        return ""
    return _SEPARATOR.join(part for part in _blocks(blocks) if part)


def _blocks(blocks: list[Any]) -> Iterator[str]:
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            yield _str(block.get("text"))
        elif kind == "tool_call":
            yield _str(block.get("name"))
            yield from _values(block.get("arguments"))
        elif kind == "tool_result":
            items = block.get("content")
            if isinstance(items, list):
                yield from _blocks(items)
        elif kind == "json":
            yield from _values(block.get("data"))
            yield _str(block.get("summary"))
        elif kind == "artifact_ref":
            yield _str(block.get("summary"))


def _values(value: Any) -> Iterator[str]:
    """The scalar values of a JSON value, depth first (strings and numbers; keys left out)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield str(value)
    elif isinstance(value, list):
        for item in value:
            yield from _values(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _values(item)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
