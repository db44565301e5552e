"""Lifecycle writes: sessions, agents, runs and switches, as writer jobs.

Each public function here is a job: a sync function of the writer's connection that runs inside
its transaction and either completes or raises (and is rolled back). Input arrives validated by
the store; what needs the database (existence, ownership, lifecycle rules) is checked here, under
the write lock, so that concurrent callers and processes cannot race past a rule.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, delete, exists, select, update

from soong_store.backends.base import lock_session
from soong_store.catalog import lookup as catalog
from soong_store.errors import InvalidArgument, StorageError
from soong_store.model.enums import (
    AgentStatus,
    AgentType,
    EndReason,
    EventLevel,
    RunStatus,
    SessionStatus,
)
from soong_store.model.ids import new_id, new_session_id, utc_now
from soong_store.model.records import (
    AgentRecord,
    RunRecord,
    SessionRecord,
    agent_record,
    run_record,
    session_record,
)
from soong_store.read import record_reads
from soong_store.rules import tree
from soong_store.schema.tables import agents_table, artifacts_table, runs_table, sessions_table
from soong_store.search.index import unindex_session
from soong_store.write.session_writer import SessionWriter
from soong_store.write.unit_of_work import EventOp
from soong_store.write.usage_ledger import enter_usage


def create_session(
    connection: Connection,
    cwd: str,
    metadata_json: str | None,
    root_agent_type: AgentType,
    *,
    parent_session_id: str | None = None,
    session_id: str | None = None,
    owner: str | None = None,
    key: str | None = None,
) -> SessionRecord:
    """Insert a session and its root agent (one transaction); its pair comes with its first write.

    No schema changes here, so no other connection re-reads the schema after a new session.

    ``session_id`` is for a fork, whose id is chosen before its files are linked; it is
    generated here otherwise (again on a collision). A ``key`` another session of the same
    ``owner`` holds is :class:`InvalidArgument` (see :func:`claim_key`).
    """
    if key is not None:
        claim_key(connection, owner, key)
    while True:
        chosen = session_id or new_session_id()
        lock_session(connection, chosen)
        taken = connection.execute(
            select(exists().where(sessions_table.c.session_id == chosen))
        ).scalar()
        if not taken:
            session_id = chosen
            break
        if session_id is not None:
            raise StorageError(f"session id {session_id!r} was taken meanwhile: try again")
    now = utc_now()
    agent_id = new_id("agent")
    row = {
        "session_id": session_id,
        "cwd": cwd,
        "root_agent_id": agent_id,
        "active_node_id": None,
        "parent_session_id": parent_session_id,
        "status": str(SessionStatus.ACTIVE),
        "metadata_json": metadata_json,
        "created_at": now,
        "updated_at": now,
        "owner": owner,
        "key": key,
    }
    connection.execute(sessions_table.insert(), row)
    connection.execute(
        agents_table.insert(), _agent_row(agent_id, session_id, root_agent_type, now)
    )
    return session_record(row)


def claim_key(connection: Connection, owner: str | None, key: str) -> None:
    """Refuse ``key`` if a session of ``owner`` (or, ``None``, of no owner) holds it already.

    The lock makes two writers of the same name on PostgreSQL wait for each other, so the second
    is refused here with a clear error; the unique indexes of ``sessions`` refuse the clash in
    any case.

    Raises:
        InvalidArgument: the key is taken (nothing is written).
    """
    lock_session(connection, f"owner-key:{owner}:{key}")
    taken = connection.execute(
        select(sessions_table.c.session_id).where(*record_reads.key_filter(owner, key))
    ).scalar()
    if taken is not None:
        whose = "no owner" if owner is None else f"owner {owner!r}"
        raise InvalidArgument(
            f"key {key!r} already names session {taken!r} of {whose}",
            key=key,
            owner=owner,
            session_id=taken,
        )


def _agent_row(agent_id: str, session_id: str, agent_type: AgentType, now: str) -> dict[str, Any]:
    return {
        "agent_id": agent_id,
        "session_id": session_id,
        "parent_agent_id": None,
        "agent_type": str(agent_type),
        "created_by_run_id": None,
        "fork_from_node_id": None,
        "status": str(AgentStatus.IDLE),
        "result_json": None,
        "metadata_json": None,
        "created_at": now,
        "updated_at": now,
    }


def create_agent(
    connection: Connection,
    session_id: str,
    agent_type: AgentType,
    parent_agent_id: str | None,
    created_by_run_id: str | None,
    fork_from_node_id: str | None,
    metadata_json: str | None,
) -> AgentRecord:
    """Add a ``sub`` or ``fork`` agent to a session."""
    writer = SessionWriter.open(connection, session_id)
    tree.check_new_agent(agent_type, fork_from_node_id)
    if fork_from_node_id is not None:
        writer.require_node(fork_from_node_id)
    if created_by_run_id is not None:
        run = writer.run(created_by_run_id)
        parent_agent_id = parent_agent_id or run["agent_id"]
    parent_agent_id = parent_agent_id or writer.session["root_agent_id"]
    writer.agent(parent_agent_id)
    now = utc_now()
    row = _agent_row(new_id("agent"), session_id, agent_type, now)
    row.update(
        parent_agent_id=parent_agent_id,
        created_by_run_id=created_by_run_id,
        fork_from_node_id=fork_from_node_id,
        metadata_json=metadata_json,
    )
    connection.execute(agents_table.insert(), row)
    writer.add_event(
        EventOp.own(
            "agent_created",
            agent_id=row["agent_id"],
            run_id=created_by_run_id,
            node_id=fork_from_node_id,
            payload={"agent_type": str(agent_type), "parent_agent_id": parent_agent_id},
        )
    )
    writer.finish()
    return agent_record(row)


def update_agent(
    connection: Connection,
    agent_id: str,
    status: AgentStatus | None,
    result_json: str | None,
    metadata_json: str | None,
) -> AgentRecord:
    """Change an agent's status, result or metadata; terminal statuses are final."""
    writer = SessionWriter.open(connection, record_reads.get_agent(connection, agent_id).session_id)
    current = agent_record(writer.agent(agent_id))  # as it is under the session's lock
    values: dict[str, Any] = {"updated_at": utc_now()}
    if tree.agent_status_changes(agent_id, current.status, status):
        values["status"] = str(status)
        writer.add_event(
            EventOp.own(
                "agent_status_changed",
                agent_id=agent_id,
                payload={"from": str(current.status), "to": str(status)},
            )
        )
    if result_json is not None:
        values["result_json"] = result_json
    if metadata_json is not None:
        values["metadata_json"] = metadata_json
    connection.execute(
        update(agents_table).where(agents_table.c.agent_id == agent_id).values(values)
    )
    writer.finish()
    return record_reads.get_agent(connection, agent_id)


def _check_main_run_slot(
    writer: SessionWriter, agent_id: str, status: RunStatus, run_id: str | None
) -> None:
    def running_run_id() -> str | None:
        running: str | None = writer.connection.execute(
            select(runs_table.c.run_id).where(
                runs_table.c.session_id == writer.session_id,
                runs_table.c.agent_id == agent_id,
                runs_table.c.status == str(RunStatus.RUNNING),
                runs_table.c.run_id != (run_id or ""),
            )
        ).scalar()
        return running

    tree.check_main_run_slot(
        writer.session_id,
        status,
        root_agent=agent_id == writer.session["root_agent_id"],
        running_run_id=running_run_id,
    )


def start_run(
    connection: Connection,
    session_id: str,
    agent_id: str,
    status: RunStatus,
    metadata_json: str | None,
) -> RunRecord:
    """Create a run of an agent (queued, pending or running)."""
    writer = SessionWriter.open(connection, session_id)
    tree.check_start_status(status)
    agent = writer.agent(agent_id)
    tree.check_agent_takes_runs(agent_id, agent["status"])
    _check_main_run_slot(writer, agent_id, status, None)
    now = utc_now()
    row = {
        "run_id": new_id("run"),
        "session_id": session_id,
        "agent_id": agent_id,
        "status": str(status),
        "start_node_id": None,
        "end_node_id": None,
        "end_reason": None,
        "turn_count": None,
        "usage_json": None,
        "error_json": None,
        "metadata_json": metadata_json,
        "created_at": now,
        "updated_at": now,
    }
    connection.execute(runs_table.insert(), row)
    writer.add_event(
        EventOp.own(
            "run_started" if status == RunStatus.RUNNING else f"run_{status}",
            run_id=row["run_id"],
            payload={"status": str(status)},
        )
    )
    writer.finish()
    return run_record(row)


def update_run(
    connection: Connection,
    run_id: str,
    status: RunStatus | None,
    turn_count: int | None,
    usage_json: str | None,
    metadata_json: str | None,
) -> RunRecord:
    """Move a run forward (queued → pending → running) or update its counters."""
    writer = SessionWriter.open(connection, record_reads.get_run(connection, run_id).session_id)
    current = run_record(writer.run(run_id))  # as it is under the session's lock
    values: dict[str, Any] = {}
    if status is not None and tree.run_status_changes(run_id, current.status, status):
        _check_main_run_slot(writer, current.agent_id, status, run_id)
        values["status"] = str(status)
        writer.add_event(
            EventOp.own(
                "run_started" if status == RunStatus.RUNNING else "run_status_changed",
                run_id=run_id,
                payload={"from": str(current.status), "to": str(status)},
            )
        )
    if turn_count is not None:
        values["turn_count"] = turn_count
    if usage_json is not None:
        values["usage_json"] = usage_json
    if metadata_json is not None:
        values["metadata_json"] = metadata_json
    row = writer.update_run(run_id, **values)
    writer.finish()
    if usage_json is not None:
        enter_usage(connection, [row])
    return run_record(row)


def finish_run(
    connection: Connection,
    run_id: str,
    status: RunStatus,
    end_reason: EndReason,
    usage_json: str | None,
    error_json: str | None,
    turn_count: int | None,
) -> RunRecord:
    """End a run with a terminal status and an end reason; a finished run stays finished."""
    tree.check_finish_status(status)
    writer = SessionWriter.open(connection, record_reads.get_run(connection, run_id).session_id)
    current = run_record(writer.run(run_id))  # as it is under the session's lock
    tree.check_not_ended(run_id, current.status)
    values: dict[str, Any] = {"status": str(status), "end_reason": str(end_reason)}
    if usage_json is not None:
        values["usage_json"] = usage_json
    if error_json is not None:
        values["error_json"] = error_json
    if turn_count is not None:
        values["turn_count"] = turn_count
    failed = status == RunStatus.FAILED
    writer.add_event(
        EventOp.own(
            "run_finished",
            run_id=run_id,
            level=EventLevel.ERROR if failed else EventLevel.INFO,
            payload={"status": str(status), "end_reason": str(end_reason)},
        )
    )
    row = writer.update_run(run_id, **values)
    writer.finish()
    if usage_json is not None:
        enter_usage(connection, [row])
    return run_record(row)


def switch_node(connection: Connection, session_id: str, node_id: str | None) -> SessionRecord:
    """Make ``node_id`` the session's active node (``None``: none), with a ``node_switched`` event.

    Without an active node the path is empty, and the root agent's next node without a parent
    is a new root. The node must be the root agent's (``InvalidArgument``): the active node is
    where the root agent goes on.
    """
    writer = SessionWriter.open(connection, session_id)
    if node_id is not None:
        agent_id = writer.require_node(node_id)
        tree.check_switch(node_id, agent_id, root_agent_id=writer.session["root_agent_id"])
    previous = writer.session["active_node_id"]
    writer.set_active(node_id)
    writer.add_event(
        EventOp.own("node_switched", node_id=node_id, payload={"from": previous, "to": node_id})
    )
    writer.finish()
    return session_record(writer.session)


def still_idle(connection: Connection, session_id: str, idle_before: str) -> bool:
    """Whether the session exists and was not updated since ``idle_before`` (retention).

    Asked under the session's lock, in the job that then archives or deletes it: a session that
    was written (or deleted) since retention listed it is left alone.
    """
    return _idle_status(connection, session_id, idle_before) is not None


def _idle_status(connection: Connection, session_id: str, idle_before: str) -> str | None:
    lock_session(connection, session_id)
    row = connection.execute(
        select(sessions_table.c.updated_at, sessions_table.c.status).where(
            sessions_table.c.session_id == session_id
        )
    ).first()
    return None if row is None or row[0] >= idle_before else str(row[1])


def archive_idle(connection: Connection, session_id: str, idle_before: str) -> bool:
    """Archive the session if it is active and :func:`still_idle`; whether it was archived."""
    if _idle_status(connection, session_id, idle_before) != SessionStatus.ACTIVE:
        return False
    archive_session(connection, session_id)
    return True


def delete_idle(connection: Connection, session_id: str, idle_before: str) -> list[str] | None:
    """Delete the session if it is :func:`still_idle`: its artifact paths, else ``None``."""
    if not still_idle(connection, session_id, idle_before):
        return None
    return delete_session(connection, session_id)


def archive_session(connection: Connection, session_id: str) -> SessionRecord:
    """Mark a session archived: readable, no longer writable (archiving twice is harmless)."""
    lock_session(connection, session_id)
    row = record_reads.session_row(connection, session_id)
    if row["status"] == SessionStatus.ARCHIVED:
        return session_record(row)
    writer = SessionWriter.open(connection, session_id)
    writer.add_event(EventOp.own("session_archived"))
    connection.execute(
        update(sessions_table)
        .where(sessions_table.c.session_id == session_id)
        .values(status=str(SessionStatus.ARCHIVED), updated_at=utc_now())
    )
    return record_reads.get_session(connection, session_id)


def delete_session(connection: Connection, session_id: str) -> list[str]:
    """Remove a session's rows and tables; return the artifact paths its rows named.

    The files go afterwards, in a job of their own (:mod:`soong_store.write.file_jobs`), and only
    those no row names any more (a fork made by an earlier version names its parent's files).
    """
    lock_session(connection, session_id)
    record_reads.session_row(connection, session_id)
    paths = list(
        connection.execute(
            select(artifacts_table.c.path).where(artifacts_table.c.session_id == session_id)
        ).scalars()
    )
    catalog.drop_pair(connection, session_id)
    unindex_session(connection, session_id)
    connection.execute(delete(artifacts_table).where(artifacts_table.c.session_id == session_id))
    connection.execute(delete(runs_table).where(runs_table.c.session_id == session_id))
    connection.execute(delete(agents_table).where(agents_table.c.session_id == session_id))
    connection.execute(delete(sessions_table).where(sessions_table.c.session_id == session_id))
    return sorted(set(paths))
