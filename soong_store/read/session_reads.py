"""Reads of a session's own tables: its nodes, paths and timeline, each returning records.

Sync functions over a read connection, in one deferred transaction each (a reader thread's, or a
small read's on the loop), so a multi-statement read sees a single WAL snapshot. A path is one
recursive CTE climbing from the chosen node towards its root, bounded by the ``limit`` asked for
(and by the last compaction, for a context). The global tables' records (sessions, agents, runs,
artifacts) are :mod:`soong_store.read.record_reads`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy import BigInteger, Connection, Table, bindparam, func, select
from sqlalchemy.engine import Dialect
from sqlalchemy.engine.interfaces import DBAPICursor

from soong_store.backends.link import Link
from soong_store.backends.prepared import Prepared, Runner
from soong_store.catalog.lookup import nodes_sql_name, tables_of
from soong_store.errors import NotFound, StorageError
from soong_store.model.enums import NodeType
from soong_store.model.first_event import created_event_row
from soong_store.model.row_records import EVENT_COLUMNS, NODE_COLUMNS, event_records, node_records
from soong_store.read.climb import climb_statement
from soong_store.read.record_reads import Row, session_row, within
from soong_store.schema.session_tables import CACHE_SIZE, SessionTables
from soong_store.schema.tables import agents_table, artifacts_table, runs_table

if TYPE_CHECKING:  # nodes hold content: model.records is imported by the reads that build them
    from soong_store.model.records import ContextView, EventRecord, NodeRecord

_UNBOUNDED = 2**63 - 1
"""The step bound of a climb with no limit (the largest stored integer)."""


def _pair(connection: Connection, session_id: str) -> SessionTables:
    """The tables of a session known to have nodes (one was just read)."""
    pair = tables_of(connection, session_id)
    if pair is None:
        raise StorageError(f"session {session_id!r} lost its tables during a read")
    return pair


def session_counts(connection: Connection, session_id: str) -> dict[str, int]:
    """How many agents, runs, nodes, events and artifacts a session has (``NotFound``: none).

    Read here rather than beside the export that also prints them, so that a command showing
    them (``show``) loads no write side. A session never written has no pair: its one event is
    the ``created`` event every read makes up for it.
    """
    session_row(connection, session_id)
    pair = tables_of(connection, session_id)
    counts = {"agents": 0, "runs": 0, "nodes": 0, "events": 1, "artifacts": 0}
    of_session = {"agents": agents_table, "runs": runs_table, "artifacts": artifacts_table}
    for kind, table in of_session.items():
        stmt = select(func.count()).select_from(table).where(table.c.session_id == session_id)
        counts[kind] = int(connection.execute(stmt).scalar() or 0)
    for kind, table in () if pair is None else (("nodes", pair.nodes), ("events", pair.events)):
        stmt = select(func.count()).select_from(table)
        counts[kind] = int(connection.execute(stmt).scalar() or 0)
    return counts


def get_node(connection: Connection, session_id: str, node_id: str) -> NodeRecord:
    """One node of a session."""
    from soong_store.model.records import node_record

    session_row(connection, session_id)
    pair = tables_of(connection, session_id)
    row = None
    if pair is not None:
        nodes = pair.nodes
        row = connection.execute(select(nodes).where(nodes.c.node_id == node_id)).mappings().first()
    if row is None:
        raise NotFound(f"no node {node_id!r} in session {session_id!r}", node_id=node_id)
    return node_record(session_id, row)


def list_nodes(connection: Connection, session_id: str) -> list[NodeRecord]:
    """Every node of a session by ``node_seq``."""
    from soong_store.model.records import node_record

    session_row(connection, session_id)
    pair = tables_of(connection, session_id)
    if pair is None:
        return []
    nodes = pair.nodes
    rows = connection.execute(select(nodes).order_by(nodes.c.node_seq)).mappings()
    return [node_record(session_id, row) for row in rows]


def children(
    connection: Connection, session_id: str, node_id: str, budget: int | None = None
) -> list[NodeRecord]:
    """The children of a node by ``node_seq`` (``budget``: see :func:`.record_reads.within`)."""
    from soong_store.model.records import node_record

    get_node(connection, session_id, node_id)
    nodes = _pair(connection, session_id).nodes
    stmt = select(nodes).where(nodes.c.parent_id == node_id).order_by(nodes.c.node_seq)
    rows = within(connection, stmt, budget, f"children of node {node_id!r}")
    return [node_record(session_id, row) for row in rows]


def climb(
    connection: Link,
    session_id: str,
    node_id: str,
    steps: int | None = None,
    *,
    to_compaction: bool = False,
) -> list[NodeRecord]:
    """The nodes from ``node_id`` up its parent chain, leaf first: a bounded recursive CTE.

    At most ``steps`` nodes (``None``: up to a root); with ``to_compaction`` the climb also ends
    at the first compaction node (included). Each step up must reach a node numbered before the
    one below it, as every parent is, so the walk ends after at most as many steps as the
    session has nodes, even in a damaged table whose parent chain loops. The statement is
    compiled once per table and run on the driver's cursor, and each record is built from its
    row as the row is fetched (it is the context's hot read: no row outlives its record). A
    session never written has no tables and so no nodes.
    """
    cursor = _climb(connection, session_id, node_id, steps, to_compaction)
    if cursor is None:
        return []
    try:
        return node_records(session_id, cast(Iterable[Sequence[Any]], cursor))
    finally:
        cursor.close()  # a damaged row stops the loop: the statement goes now, not with the error


def _climb(
    connection: Link,
    session_id: str,
    node_id: str,
    steps: int | None,
    to_compaction: bool,
) -> DBAPICursor | None:
    """The climb run, its rows (:data:`~soong_store.model.records.NODE_COLUMNS`) to fetch."""
    table = nodes_sql_name(connection, session_id)
    if table is None:
        return None
    prepared = climb_statement(table, to_compaction, connection.dialect)
    params = {"node_id": node_id, "steps": _UNBOUNDED if steps is None else steps}
    return Runner(connection).execute(prepared, params)


def damaged_chain(session_id: str, node_id: str, parent_id: str | None) -> StorageError:
    """The error of a parent chain that does not end at a root (a missing parent, a cycle)."""
    return StorageError(
        f"the parent chain of node {node_id!r} in session {session_id!r} is damaged: it names "
        f"parent {parent_id!r}, which is missing or not numbered before it (a cycle?); run check",
        session_id=session_id,
        node_id=node_id,
    )


def path_target(connection: Connection, session_id: str, node_id: str | None) -> str | None:
    """The node a path read ends at: ``node_id``, else the session's active node."""
    session = session_row(connection, session_id)
    return node_id if node_id is not None else session["active_node_id"]


def tail_rows(
    connection: Connection,
    session_id: str,
    node_id: str,
    limit: int | None,
    *,
    to_compaction: bool = False,
) -> list[Row]:
    """The last ``limit`` rows of the path to ``node_id`` (of its cut path), root-most first.

    Only the tail is read. A climb that ends before ``limit`` rows must end at a root (or at a
    compaction node, for the cut path), else the chain is damaged (``StorageError``). Rows are
    column name to stored value, for callers that copy them.
    """
    cursor = _climb(connection, session_id, node_id, _steps(limit), to_compaction)
    found = [] if cursor is None else cursor.fetchall()
    rows: list[Row] = [dict(zip(NODE_COLUMNS, row, strict=True)) for row in found]
    top = None if not rows else (rows[-1]["node_id"], rows[-1]["parent_id"], rows[-1]["node_type"])
    return _tail(session_id, node_id, rows, limit, to_compaction, top)


def tail_nodes(
    connection: Connection,
    session_id: str,
    node_id: str,
    limit: int | None,
    *,
    to_compaction: bool = False,
) -> list[NodeRecord]:
    """:func:`tail_rows` as records (what the path reads return)."""
    nodes = climb(connection, session_id, node_id, _steps(limit), to_compaction=to_compaction)
    top = None if not nodes else (nodes[-1].node_id, nodes[-1].parent_id, nodes[-1].node_type)
    return _tail(session_id, node_id, nodes, limit, to_compaction, top)


def _steps(limit: int | None) -> int | None:
    return None if limit is None else max(limit, 1)


_T = TypeVar("_T")


def _tail(
    session_id: str,
    node_id: str,
    found: list[_T],
    limit: int | None,
    to_compaction: bool,
    top: tuple[str, str | None, str] | None,
) -> list[_T]:
    """A climb's findings (leaf first, ``top`` the id, parent and type of the last), root first."""
    if top is None:
        raise NotFound(f"no node {node_id!r} in session {session_id!r}", node_id=node_id)
    top_id, parent_id, node_type = top
    ended = parent_id is None or (to_compaction and node_type == NodeType.COMPACTION.value)
    if not ended and (limit is None or len(found) < limit):
        raise damaged_chain(session_id, top_id, parent_id)
    found.reverse()
    return found if limit is None else found[max(len(found) - limit, 0) :]


def active_path_rows(
    connection: Connection, session_id: str, node_id: str | None, limit: int | None = None
) -> list[Row]:
    """Raw node rows of the path to ``node_id`` (default: the active node), root first.

    ``limit``: only the last that many (read from the leaf up, never the whole path).
    """
    target = path_target(connection, session_id, node_id)
    if target is None:
        return []
    return tail_rows(connection, session_id, target, limit)


def active_path(
    connection: Connection, session_id: str, node_id: str | None, limit: int | None = None
) -> list[NodeRecord]:
    """The nodes from the root down to ``node_id`` (default: the active node), root first."""
    target = path_target(connection, session_id, node_id)
    if target is None:
        return []
    return tail_nodes(connection, session_id, target, limit)


def context(
    connection: Connection, session_id: str, node_id: str | None, limit: int | None = None
) -> ContextView:
    """The active path cut at its last compaction node (kept), with the token total.

    Read from the leaf up to that compaction (or the root), at most ``limit`` nodes.
    """
    from soong_store.model.records import ContextView, context_view

    target = path_target(connection, session_id, node_id)
    if target is None:
        return ContextView(nodes=[], token_count=0)
    return context_view(tail_nodes(connection, session_id, target, limit, to_compaction=True))


def timeline(
    connection: Link,
    session_id: str,
    run_id: str | None,
    after_seq: int | None,
    limit: int | None,
) -> list[EventRecord]:
    """Events by ``seq`` (by ``run_seq`` for one run), after a cursor, at most ``limit``.

    One prepared statement per table and form (a session's events, or one run's): a page of a
    long timeline is read as often as a ``--follow`` polls. The session row is read only for a
    session without a pair (its first event is made from it, or ``NotFound``): a pair's catalog
    row holds a foreign key to it, so a session with a pair exists.
    """
    from soong_store.model.records import event_record

    pair = tables_of(connection, session_id)
    if pair is None:
        first = created_event_row(session_row(connection, session_id))
        wanted = run_id is None and (after_seq is None or after_seq < 1) and limit != 0
        return [event_record(session_id, first)] if wanted else []
    events = pair.events
    prepared = _timeline_statement(events, run_id is not None, connection.dialect)
    params = {
        "run_id": run_id,
        "after_seq": -1 if after_seq is None else after_seq,
        "limit": _UNBOUNDED if limit is None else limit,
    }
    if run_id is None:
        del params["run_id"]
    return event_records(session_id, Runner(connection).execute(prepared, params).fetchall())


@lru_cache(maxsize=CACHE_SIZE)
def _timeline_statement(events: Table, of_run: bool, dialect: Dialect) -> Prepared:
    columns = [events.c[name] for name in EVENT_COLUMNS]
    stmt = select(*columns).where(events.c.seq > bindparam("after_seq"))
    if of_run:
        stmt = stmt.where(events.c.run_id == bindparam("run_id")).order_by(events.c.run_seq)
    else:
        stmt = stmt.order_by(events.c.seq)
    return Prepared.compile(stmt.limit(bindparam("limit", type_=BigInteger)), dialect)
