"""Forking a session: a new session holding copies of the active path up to a node.

The copied nodes go through the session writer's one insert path (:meth:`SessionWriter.
restore_node`), which numbers them. Artifacts the copied content refers to get files of the
fork's own: hard links to the source's files (no bytes copied), made before the fork's rows are
written, as every artifact file is. So a fork never names another session's folder, and deleting
either session leaves the other whole. The fork's id is chosen before its files are linked
(:func:`plan_fork`), and the job refuses it if it was taken meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select

from soong_store.errors import NotFound, StorageError
from soong_store.model.content import (
    artifact_refs,
    content_from_json,
    content_to_json,
    map_artifact_refs,
)
from soong_store.model.ids import new_id, new_session_id, utc_now
from soong_store.model.records import SessionRecord, session_record
from soong_store.read import record_reads
from soong_store.read import session_reads as reads
from soong_store.schema.tables import artifacts_table
from soong_store.write.lifecycle import create_session
from soong_store.write.session_writer import SessionWriter
from soong_store.write.unit_of_work import EventOp


@dataclass(frozen=True, slots=True)
class SharedFile:
    """One artifact of the source as the fork will hold it."""

    artifact_id: str
    source_path: str
    path: str


@dataclass(frozen=True, slots=True)
class ForkPlan:
    """The fork's id and, per source artifact id, the file the fork gets."""

    session_id: str
    files: dict[str, SharedFile] = field(default_factory=dict)


def plan_fork(connection: Connection, session_id: str, node_id: str) -> ForkPlan:
    """A read: the fork's id and the artifact files its copy of the path needs."""
    path = reads.active_path_rows(connection, session_id, node_id)
    refs: list[str] = []
    for row in path:
        refs += [r for r in artifact_refs(content_from_json(row["content_json"])) if r not in refs]
    fork_id = new_session_id()
    files: dict[str, SharedFile] = {}
    for ref in refs:
        stored = _source_artifact(connection, ref, session_id)
        new_artifact = new_id("art")
        name = stored["path"].partition("/")[2]
        ext = name[len(ref) :] if name.startswith(ref) else ""
        files[ref] = SharedFile(new_artifact, stored["path"], f"{fork_id}/{new_artifact}{ext}")
    return ForkPlan(fork_id, files)


def _source_artifact(connection: Connection, artifact_id: str, session_id: str) -> dict[str, Any]:
    row = (
        connection.execute(
            select(artifacts_table).where(artifacts_table.c.artifact_id == artifact_id)
        )
        .mappings()
        .first()
    )
    if row is None or row["session_id"] != session_id:
        raise NotFound(
            f"no artifact {artifact_id!r} in session {session_id!r}", artifact_id=artifact_id
        )
    return dict(row)


def fork_session(
    connection: Connection, session_id: str, node_id: str, plan: ForkPlan
) -> SessionRecord:
    """The writer job of a fork: the session, its copied nodes and artifact rows, its events."""
    source = record_reads.session_row(connection, session_id)
    path = reads.active_path_rows(connection, session_id, node_id)
    root = record_reads.get_agent(connection, source["root_agent_id"])
    fork = create_session(
        connection,
        source["cwd"],
        source["metadata_json"],
        root.agent_type,
        parent_session_id=session_id,
        session_id=plan.session_id,
        owner=source["owner"],  # a fork stays with its owner; the key names the source alone
    )
    writer = SessionWriter.open(connection, fork.session_id)
    copied: dict[str, str] = {}
    placed: set[str] = set()
    for row in path:
        new_node_id = new_id("node")
        blocks = content_from_json(row["content_json"])
        refs = artifact_refs(blocks)
        if any(ref not in plan.files for ref in refs):
            raise StorageError(f"the plan of the fork of {session_id!r} misses an artifact")
        content_json = row["content_json"]
        if refs:
            mapping = {ref: plan.files[ref].artifact_id for ref in refs}
            content_json = content_to_json(map_artifact_refs(blocks, mapping))
        parent = row["parent_id"]
        writer.restore_node(
            {
                **row,
                "node_id": new_node_id,
                "parent_id": None if parent is None else copied[parent],
                "agent_id": fork.root_agent_id,
                "run_id": None,
                "content_json": content_json,
            }
        )
        copied[row["node_id"]] = new_node_id
        for ref in refs:
            if ref not in placed:
                placed.add(ref)
                _copy_artifact_row(connection, writer, ref, plan.files[ref], fork, new_node_id)
        writer.add_event(
            EventOp.own(
                "node_created",
                node_id=new_node_id,
                agent_id=fork.root_agent_id,
                payload={"copied_from": {"session_id": session_id, "node_id": row["node_id"]}},
            )
        )
    writer.set_active(copied.get(node_id))
    writer.add_event(
        EventOp.own(
            "session_forked",
            node_id=copied.get(node_id),
            payload={"from_session_id": session_id, "from_node_id": node_id},
        )
    )
    writer.finish()
    return session_record(writer.session)


def _copy_artifact_row(
    connection: Connection,
    writer: SessionWriter,
    source_id: str,
    shared: SharedFile,
    fork: SessionRecord,
    node_id: str,
) -> None:
    row = _source_artifact(connection, source_id, str(fork.parent_session_id))
    row.update(
        artifact_id=shared.artifact_id,
        session_id=fork.session_id,
        agent_id=fork.root_agent_id,
        run_id=None,
        node_id=node_id,
        path=shared.path,
        created_at=utc_now(),
    )
    writer.restore_artifact(row)
