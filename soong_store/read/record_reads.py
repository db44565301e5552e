"""Reads of the global tables' records: sessions, agents, runs and artifacts.

Sync functions over a read connection, each in the caller's transaction (a reader thread's, or a
small read's on the loop). Every read of a session starts at its row (:func:`session_row`,
prepared); a session's listings take a ``budget`` (:func:`within`) when they run on the loop. The
reads of a session's own tables, its nodes and events, are :mod:`soong_store.read.session_reads`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import ColumnElement, Connection, RowMapping, Select, Table, or_, select
from sqlalchemy.engine import Dialect

from soong_store.backends.link import Link
from soong_store.backends.prepared import Prepared, Runner
from soong_store.backends.values import ReadOnAThread
from soong_store.errors import NotFound
from soong_store.model.enums import SessionStatus
from soong_store.model.global_records import (
    AgentRecord,
    ArtifactRecord,
    RunRecord,
    SessionRecord,
    agent_record,
    artifact_record,
    run_record,
    session_record,
)
from soong_store.schema.tables import agents_table, artifacts_table, runs_table, sessions_table

Row = Mapping[str, Any]


@lru_cache(maxsize=8)
def _session_statement(dialect: Dialect) -> Prepared:
    return Prepared.lookup(sessions_table, "session_id", dialect)


def session_row(connection: Link, session_id: str) -> Row:
    """The ``sessions`` row, or ``NotFound`` (prepared: every read of a session starts here)."""
    row = Runner(connection).first(
        _session_statement(connection.dialect), {"session_id": session_id}
    )
    if row is None:
        raise NotFound(f"no session {session_id!r}", session_id=session_id)
    return row


def owned_session(connection: Link, session_id: str, owner: str) -> SessionRecord:
    """The session if ``owner`` owns it; else ``NotFound`` exactly as for an unknown id.

    A scoped store must not tell another owner's session from one that does not exist.
    """
    row = session_row(connection, session_id)
    if row["owner"] != owner:
        raise NotFound(f"no session {session_id!r}", session_id=session_id)
    return session_record(row)


_OWNED = {"agent": agents_table, "run": runs_table, "artifact": artifacts_table}


def check_owned(connection: Connection, kind: str, value: str, owner: str) -> None:
    """``NotFound`` (as :func:`_one` says it) unless the ``kind`` row ``value`` is ``owner``'s."""
    table = _OWNED[kind]
    key = f"{kind}_id"
    stmt = (
        select(sessions_table.c.owner)
        .select_from(table.join(sessions_table, sessions_table.c.session_id == table.c.session_id))
        .where(table.c[key] == value)
    )
    found = connection.execute(stmt).first()
    if found is None or found[0] != owner:
        raise NotFound(f"no {kind} {value!r}", **{key: value})


def _one(connection: Connection, table: Table, key: str, value: str, kind: str) -> RowMapping:
    """The row of ``table`` whose ``key`` is ``value``, or ``NotFound`` naming it."""
    row = connection.execute(select(table).where(table.c[key] == value)).mappings().first()
    if row is None:
        raise NotFound(f"no {kind} {value!r}", **{key: value})
    return row


def _of_session(
    connection: Connection, table: Table, key: str, session_id: str, budget: int | None
) -> list[RowMapping]:
    """A session's rows of a global table in creation order (``NotFound`` for no session)."""
    session_row(connection, session_id)
    stmt = (
        select(table)
        .where(table.c.session_id == session_id)
        .order_by(table.c.created_at, table.c[key])
    )
    return within(connection, stmt, budget, f"{table.name} of session {session_id!r}")


def within(connection: Connection, stmt: Select[Any], budget: int | None, what: str) -> list[Any]:
    """The rows of ``stmt``; with a ``budget``, at most that many, else :class:`ReadOnAThread`."""
    if budget is not None:
        stmt = stmt.limit(budget + 1)
    rows = list(connection.execute(stmt).mappings())
    if budget is not None and len(rows) > budget:
        raise ReadOnAThread(f"more {what} than the {budget} budgeted")
    return rows


def get_session(connection: Link, session_id: str) -> SessionRecord:
    """One session."""
    return session_record(session_row(connection, session_id))


def key_filter(owner: str | None, key: str) -> tuple[ColumnElement[bool], ...]:
    """The terms that find the session ``owner`` (``None``: no owner) names ``key``.

    Written so that each is served by its unique index (``owner IS NULL`` is what the index of
    the sessions without an owner is made for).
    """
    by_owner = sessions_table.c.owner
    return (by_owner.is_(None) if owner is None else by_owner == owner, sessions_table.c.key == key)


def find_session(connection: Connection, owner: str | None, key: str) -> SessionRecord | None:
    """The session ``owner`` names ``key``, or ``None``."""
    row = connection.execute(select(sessions_table).where(*key_filter(owner, key))).mappings()
    found = row.first()
    return None if found is None else session_record(found)


@dataclass(frozen=True)
class SessionFilter:
    """What a listing of sessions keeps: each field ``None`` keeps every session."""

    owner: str | None = None
    cwd: str | None = None
    updated_after: str | None = None
    updated_before: str | None = None


def list_sessions(
    connection: Connection,
    status: SessionStatus | None,
    limit: int | None,
    after: tuple[str, str] | None = None,
    where: SessionFilter | None = None,
) -> list[SessionRecord]:
    """Sessions, most recently updated first; ``after`` is the key of the last one seen.

    The key (``updated_at``, ``session_id``, as stored) makes a page far down cost what the
    first one does: the index on ``updated_at`` is entered at the key, no row before it is read.
    An owner or a cwd has an index of its own in the same order (``where``: the filters; the
    bounds on ``updated_at`` are exclusive).
    """
    table = sessions_table
    stmt = select(table).order_by(table.c.updated_at.desc(), table.c.session_id.desc())
    if status is not None:
        stmt = stmt.where(table.c.status == str(status))
    if where is not None:
        if where.owner is not None:
            stmt = stmt.where(table.c.owner == where.owner)
        if where.cwd is not None:
            stmt = stmt.where(table.c.cwd == where.cwd)
        if where.updated_after is not None:
            stmt = stmt.where(table.c.updated_at > where.updated_after)
        if where.updated_before is not None:
            stmt = stmt.where(table.c.updated_at < where.updated_before)
    if after is not None:
        updated, sid = after
        column = sessions_table.c.updated_at
        stmt = stmt.where(
            column <= updated,
            or_(column < updated, sessions_table.c.session_id < sid),
        )
    if limit is not None:
        stmt = stmt.limit(limit)
    return [session_record(row) for row in connection.execute(stmt).mappings()]


def idle_sessions(
    connection: Connection, before: str, owner: str | None, status: SessionStatus | None
) -> list[str]:
    """The ids of the sessions last updated before ``before``, oldest first (retention).

    Served by the index on ``updated_at`` (with the owner's, or the status's, when given).
    """
    table = sessions_table
    stmt = select(table.c.session_id).where(table.c.updated_at < before)
    if owner is not None:
        stmt = stmt.where(table.c.owner == owner)
    if status is not None:
        stmt = stmt.where(table.c.status == str(status))
    stmt = stmt.order_by(table.c.updated_at, table.c.session_id)
    return list(connection.execute(stmt).scalars())


def get_agent(connection: Connection, agent_id: str) -> AgentRecord:
    """One agent."""
    return agent_record(_one(connection, agents_table, "agent_id", agent_id, "agent"))


def list_agents(
    connection: Connection, session_id: str, budget: int | None = None
) -> list[AgentRecord]:
    """A session's agents in creation order (``budget``: see :func:`within`)."""
    rows = _of_session(connection, agents_table, "agent_id", session_id, budget)
    return [agent_record(row) for row in rows]


def get_run(connection: Connection, run_id: str) -> RunRecord:
    """One run."""
    return run_record(_one(connection, runs_table, "run_id", run_id, "run"))


def list_runs(
    connection: Connection, session_id: str, budget: int | None = None
) -> list[RunRecord]:
    """A session's runs in creation order (``budget``: see :func:`within`)."""
    rows = _of_session(connection, runs_table, "run_id", session_id, budget)
    return [run_record(row) for row in rows]


def get_artifact(connection: Connection, artifact_id: str) -> ArtifactRecord:
    """One artifact row."""
    row = _one(connection, artifacts_table, "artifact_id", artifact_id, "artifact")
    return artifact_record(row)


def list_artifacts(
    connection: Connection, session_id: str, budget: int | None = None
) -> list[ArtifactRecord]:
    """A session's artifacts in creation order (``budget``: see :func:`within`)."""
    rows = _of_session(connection, artifacts_table, "artifact_id", session_id, budget)
    return [artifact_record(row) for row in rows]
