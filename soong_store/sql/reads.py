"""Read queries: sync functions over a read connection, each returning records.

They run in the store's reader threads inside one deferred transaction each, so a multi-statement
read sees a single WAL snapshot. The active path is one recursive CTE from the chosen node up to
its root.
"""

from __future__ import annotations

from sqlalchemy import Connection, RowMapping, Table, literal, or_, select

from soong_store.errors import NotFound, StorageError
from soong_store.model.enums import NodeType, SessionStatus
from soong_store.model.records import (
    AgentRecord,
    ArtifactRecord,
    ContextView,
    EventRecord,
    NodeRecord,
    RunRecord,
    SessionRecord,
    agent_record,
    artifact_record,
    event_record,
    node_record,
    run_record,
    session_record,
)
from soong_store.schema.catalog import SessionTables, tables_of
from soong_store.schema.models import agents_table, artifacts_table, runs_table, sessions_table
from soong_store.sql.first_event import created_event_row


def session_row(connection: Connection, session_id: str) -> RowMapping:
    """The ``sessions`` row, or ``NotFound``."""
    row = (
        connection.execute(select(sessions_table).where(sessions_table.c.session_id == session_id))
        .mappings()
        .first()
    )
    if row is None:
        raise NotFound(f"no session {session_id!r}", session_id=session_id)
    return row


def _one(connection: Connection, table: Table, key: str, value: str, kind: str) -> RowMapping:
    """The row of ``table`` whose ``key`` is ``value``, or ``NotFound`` naming it."""
    row = connection.execute(select(table).where(table.c[key] == value)).mappings().first()
    if row is None:
        raise NotFound(f"no {kind} {value!r}", **{key: value})
    return row


def _of_session(
    connection: Connection, table: Table, key: str, session_id: str
) -> list[RowMapping]:
    """A session's rows of a global table in creation order (``NotFound`` for no session)."""
    session_row(connection, session_id)
    stmt = (
        select(table)
        .where(table.c.session_id == session_id)
        .order_by(table.c.created_at, table.c[key])
    )
    return list(connection.execute(stmt).mappings())


def _pair(connection: Connection, session_id: str) -> SessionTables:
    """The tables of a session known to have nodes (one was just read)."""
    pair = tables_of(connection, session_id)
    if pair is None:
        raise StorageError(f"session {session_id!r} lost its tables during a read")
    return pair


def get_session(connection: Connection, session_id: str) -> SessionRecord:
    """One session."""
    return session_record(session_row(connection, session_id))


def list_sessions(
    connection: Connection,
    status: SessionStatus | None,
    limit: int | None,
    after: tuple[str, str] | None = None,
) -> list[SessionRecord]:
    """Sessions, most recently updated first; ``after`` is the key of the last one seen.

    The key (``updated_at``, ``session_id``, as stored) makes a page far down cost what the
    first one does: the index on ``updated_at`` is entered at the key, no row before it is read.
    """
    stmt = select(sessions_table).order_by(
        sessions_table.c.updated_at.desc(), sessions_table.c.session_id.desc()
    )
    if after is not None:
        updated, sid = after
        column = sessions_table.c.updated_at
        stmt = stmt.where(
            column <= updated,
            or_(column < updated, sessions_table.c.session_id < sid),
        )
    if status is not None:
        stmt = stmt.where(sessions_table.c.status == str(status))
    if limit is not None:
        stmt = stmt.limit(limit)
    return [session_record(row) for row in connection.execute(stmt).mappings()]


def get_agent(connection: Connection, agent_id: str) -> AgentRecord:
    """One agent."""
    return agent_record(_one(connection, agents_table, "agent_id", agent_id, "agent"))


def list_agents(connection: Connection, session_id: str) -> list[AgentRecord]:
    """A session's agents in creation order."""
    rows = _of_session(connection, agents_table, "agent_id", session_id)
    return [agent_record(row) for row in rows]


def get_run(connection: Connection, run_id: str) -> RunRecord:
    """One run."""
    return run_record(_one(connection, runs_table, "run_id", run_id, "run"))


def list_runs(connection: Connection, session_id: str) -> list[RunRecord]:
    """A session's runs in creation order."""
    return [run_record(row) for row in _of_session(connection, runs_table, "run_id", session_id)]


def get_node(connection: Connection, session_id: str, node_id: str) -> NodeRecord:
    """One node of a session."""
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
    session_row(connection, session_id)
    pair = tables_of(connection, session_id)
    if pair is None:
        return []
    nodes = pair.nodes
    rows = connection.execute(select(nodes).order_by(nodes.c.node_seq)).mappings()
    return [node_record(session_id, row) for row in rows]


def children(connection: Connection, session_id: str, node_id: str) -> list[NodeRecord]:
    """The children of a node by ``node_seq``."""
    get_node(connection, session_id, node_id)
    nodes = _pair(connection, session_id).nodes
    rows = connection.execute(
        select(nodes).where(nodes.c.parent_id == node_id).order_by(nodes.c.node_seq)
    ).mappings()
    return [node_record(session_id, row) for row in rows]


def active_path_rows(
    connection: Connection, session_id: str, node_id: str | None
) -> list[RowMapping]:
    """Raw node rows from the root down to ``node_id`` (default: the active node).

    Each step up must reach a node numbered before the one below it, as every parent is, so the
    walk ends after at most as many steps as the session has nodes, even in a damaged table
    whose parent chain loops; a path that then does not end at a root raises ``StorageError``.
    """
    session = session_row(connection, session_id)
    target = node_id if node_id is not None else session["active_node_id"]
    if target is None:
        return []
    pair = tables_of(connection, session_id)
    if pair is None:
        raise NotFound(f"no node {target!r} in session {session_id!r}", node_id=target)
    nodes = pair.nodes
    start = select(
        nodes.c.node_id, nodes.c.parent_id, nodes.c.node_seq, literal(0).label("depth")
    ).where(nodes.c.node_id == target)
    path = start.cte("path", recursive=True)
    step = (
        select(
            nodes.c.node_id, nodes.c.parent_id, nodes.c.node_seq, (path.c.depth + 1).label("depth")
        )
        .join(path, nodes.c.node_id == path.c.parent_id)
        .where(nodes.c.node_seq < path.c.node_seq)
    )
    path = path.union_all(step)
    rows = list(
        connection.execute(
            select(nodes)
            .join(path, nodes.c.node_id == path.c.node_id)
            .order_by(path.c.depth.desc())
        ).mappings()
    )
    if not rows:
        raise NotFound(f"no node {target!r} in session {session_id!r}", node_id=target)
    if rows[0]["parent_id"] is not None:
        top = rows[0]
        raise StorageError(
            f"the parent chain of node {target!r} in session {session_id!r} is damaged: node "
            f"{top['node_id']!r} names parent {top['parent_id']!r}, which is missing or not "
            "numbered before it (a cycle?); run check",
            session_id=session_id,
            node_id=top["node_id"],
        )
    return rows


def active_path(connection: Connection, session_id: str, node_id: str | None) -> list[NodeRecord]:
    """The nodes from the root down to ``node_id`` (default: the active node), root first."""
    return [
        node_record(session_id, row) for row in active_path_rows(connection, session_id, node_id)
    ]


def context(connection: Connection, session_id: str, node_id: str | None) -> ContextView:
    """The active path cut at its last compaction node (kept), with the token total."""
    path = active_path(connection, session_id, node_id)
    cut = 0
    for index in range(len(path) - 1, -1, -1):
        if path[index].node_type == NodeType.COMPACTION:
            cut = index
            break
    kept = path[cut:]
    return ContextView(nodes=kept, token_count=sum(n.token_count or 0 for n in kept))


def timeline(
    connection: Connection,
    session_id: str,
    run_id: str | None,
    after_seq: int | None,
    limit: int | None,
) -> list[EventRecord]:
    """Events by ``seq`` (by ``run_seq`` for one run), after a cursor, at most ``limit``."""
    session = session_row(connection, session_id)
    pair = tables_of(connection, session_id)
    if pair is None:
        first = created_event_row(session)
        wanted = run_id is None and (after_seq is None or after_seq < 1)
        return [event_record(session_id, first)] if wanted else []
    events = pair.events
    stmt = select(events)
    if run_id is not None:
        stmt = stmt.where(events.c.run_id == run_id).order_by(events.c.run_seq)
    else:
        stmt = stmt.order_by(events.c.seq)
    if after_seq is not None:
        stmt = stmt.where(events.c.seq > after_seq)
    if limit is not None:
        stmt = stmt.limit(limit)
    return [event_record(session_id, row) for row in connection.execute(stmt).mappings()]


def get_artifact(connection: Connection, artifact_id: str) -> ArtifactRecord:
    """One artifact row."""
    row = _one(connection, artifacts_table, "artifact_id", artifact_id, "artifact")
    return artifact_record(row)


def list_artifacts(connection: Connection, session_id: str) -> list[ArtifactRecord]:
    """A session's artifacts in creation order."""
    rows = _of_session(connection, artifacts_table, "artifact_id", session_id)
    return [artifact_record(row) for row in rows]


def artifact_paths(connection: Connection) -> set[str]:
    """Every file path some artifact row names."""
    return set(connection.execute(select(artifacts_table.c.path).distinct()).scalars())
