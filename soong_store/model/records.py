"""Records: frozen Pydantic models of stored rows, JSON columns decoded.

Fields are the columns; ``*_json`` columns appear under their plain name (``metadata``,
``payload``, ``usage``, ``error``, ``result``) as decoded values, and ``content_json`` as a list
of content blocks. Rows read back from the database are trusted (they passed validation on the
way in), so records are built without validation (:func:`~soong_store.model.trusted.built`),
except for content, which the content adapter's validator still checks on the way out (a row
edited on disk raises ``StorageError``). Reads of many rows build from the driver's tuples
(:mod:`soong_store.model.row_records`). A write builds the records it hands out from the values
it wrote (``written_*_record``): no column is decoded.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from soong_store.model import codec
from soong_store.model.content import ContentBlock
from soong_store.model.content_json import content_from_json
from soong_store.model.enums import (
    AgentStatus,
    AgentType,
    EndReason,
    EventLevel,
    NodeType,
    Role,
    RunStatus,
    SessionStatus,
)
from soong_store.model.trusted import (
    LEVELS,
    NODE_TYPES,
    ROLES,
    built,
    damaged_column,
    damaged_content,
)


class Record(BaseModel):
    """The base of every record: frozen, no extra fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class SessionRecord(Record):
    """A row of ``sessions``."""

    session_id: str
    cwd: str
    root_agent_id: str
    active_node_id: str | None
    parent_session_id: str | None
    status: SessionStatus
    metadata: Any
    created_at: datetime
    updated_at: datetime


class AgentRecord(Record):
    """A row of ``agents``."""

    agent_id: str
    session_id: str
    parent_agent_id: str | None
    agent_type: AgentType
    created_by_run_id: str | None
    fork_from_node_id: str | None
    status: AgentStatus
    result: Any
    metadata: Any
    created_at: datetime
    updated_at: datetime


class RunRecord(Record):
    """A row of ``runs``."""

    run_id: str
    session_id: str
    agent_id: str
    status: RunStatus
    start_node_id: str | None
    end_node_id: str | None
    end_reason: EndReason | None
    turn_count: int | None
    usage: Any
    error: Any
    metadata: Any
    created_at: datetime
    updated_at: datetime


class NodeRecord(Record):
    """A row of a session's ``nodes_<sid>`` table."""

    session_id: str
    node_id: str
    node_seq: int
    parent_id: str | None
    agent_id: str
    run_id: str | None
    role: Role
    node_type: NodeType
    content: list[ContentBlock]
    metadata: Any
    token_count: int | None
    created_at: datetime


class EventRecord(Record):
    """A row of a session's ``events_<sid>`` table."""

    session_id: str
    event_id: str
    seq: int
    run_seq: int | None
    agent_id: str | None
    run_id: str | None
    level: EventLevel
    event_type: str
    node_id: str | None
    tool_call_id: str | None
    payload: Any
    created_at: datetime


class ArtifactRecord(Record):
    """A row of ``artifacts``."""

    artifact_id: str
    session_id: str
    agent_id: str | None
    run_id: str | None
    node_id: str | None
    tool_call_id: str | None
    path: str
    filename: str | None
    mime_type: str | None
    size_bytes: int | None
    summary: str | None
    metadata: Any
    created_at: datetime


class ContextView(Record):
    """What the model gets: the active path cut at its last compaction, and its token total."""

    nodes: list[NodeRecord]
    token_count: int


_ts = datetime.fromisoformat


def _stored(row: Mapping[Any, Any], column: str) -> Any:
    """Decode a JSON column; text that is not JSON means the stored data is damaged."""
    try:
        return codec.loads(row[column])
    except ValueError as exc:
        raise damaged_column(column, exc) from exc


def _stored_content(session_id: str, row: Mapping[Any, Any]) -> list[ContentBlock]:
    try:
        return content_from_json(row["content_json"])
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise damaged_content(session_id, row["node_id"], exc) from exc


def session_record(row: Mapping[Any, Any]) -> SessionRecord:
    """Build a :class:`SessionRecord` from a ``sessions`` row."""
    return built(
        SessionRecord,
        {
            "session_id": row["session_id"],
            "cwd": row["cwd"],
            "root_agent_id": row["root_agent_id"],
            "active_node_id": row["active_node_id"],
            "parent_session_id": row["parent_session_id"],
            "status": SessionStatus(row["status"]),
            "metadata": _stored(row, "metadata_json"),
            "created_at": _ts(row["created_at"]),
            "updated_at": _ts(row["updated_at"]),
        },
    )


def agent_record(row: Mapping[Any, Any]) -> AgentRecord:
    """Build an :class:`AgentRecord` from an ``agents`` row."""
    return built(
        AgentRecord,
        {
            "agent_id": row["agent_id"],
            "session_id": row["session_id"],
            "parent_agent_id": row["parent_agent_id"],
            "agent_type": AgentType(row["agent_type"]),
            "created_by_run_id": row["created_by_run_id"],
            "fork_from_node_id": row["fork_from_node_id"],
            "status": AgentStatus(row["status"]),
            "result": _stored(row, "result_json"),
            "metadata": _stored(row, "metadata_json"),
            "created_at": _ts(row["created_at"]),
            "updated_at": _ts(row["updated_at"]),
        },
    )


def run_record(row: Mapping[Any, Any]) -> RunRecord:
    """Build a :class:`RunRecord` from a ``runs`` row."""
    reason = row["end_reason"]
    return built(
        RunRecord,
        {
            "run_id": row["run_id"],
            "session_id": row["session_id"],
            "agent_id": row["agent_id"],
            "status": RunStatus(row["status"]),
            "start_node_id": row["start_node_id"],
            "end_node_id": row["end_node_id"],
            "end_reason": None if reason is None else EndReason(reason),
            "turn_count": row["turn_count"],
            "usage": _stored(row, "usage_json"),
            "error": _stored(row, "error_json"),
            "metadata": _stored(row, "metadata_json"),
            "created_at": _ts(row["created_at"]),
            "updated_at": _ts(row["updated_at"]),
        },
    )


def node_record(session_id: str, row: Mapping[Any, Any]) -> NodeRecord:
    """Build a :class:`NodeRecord` from a row of ``nodes_<sid>``."""
    return written_node_record(
        session_id, row, _stored_content(session_id, row), _stored(row, "metadata_json")
    )


def written_node_record(
    session_id: str, row: Mapping[Any, Any], content: list[ContentBlock], metadata: Any
) -> NodeRecord:
    """The :class:`NodeRecord` of a row just written, with its JSON columns' values as read.

    ``content`` and ``metadata`` are what a read of ``content_json`` and ``metadata_json``
    returns; the write has them, so nothing is decoded.
    """
    return built(
        NodeRecord,
        {
            "session_id": session_id,
            "node_id": row["node_id"],
            "node_seq": row["node_seq"],
            "parent_id": row["parent_id"],
            "agent_id": row["agent_id"],
            "run_id": row["run_id"],
            "role": ROLES.get(row["role"]) or Role(row["role"]),
            "node_type": NODE_TYPES.get(row["node_type"]) or NodeType(row["node_type"]),
            "content": content,
            "metadata": metadata,
            "token_count": row["token_count"],
            "created_at": _ts(row["created_at"]),
        },
    )


def event_record(session_id: str, row: Mapping[Any, Any]) -> EventRecord:
    """Build an :class:`EventRecord` from a row of ``events_<sid>``."""
    return written_event_record(session_id, row, _stored(row, "payload_json"))


def written_event_record(session_id: str, row: Mapping[Any, Any], payload: Any) -> EventRecord:
    """The :class:`EventRecord` of a row just written; ``payload`` is ``payload_json`` as read."""
    return built(
        EventRecord,
        {
            "session_id": session_id,
            "event_id": row["event_id"],
            "seq": row["seq"],
            "run_seq": row["run_seq"],
            "agent_id": row["agent_id"],
            "run_id": row["run_id"],
            "level": LEVELS.get(row["level"]) or EventLevel(row["level"]),
            "event_type": row["event_type"],
            "node_id": row["node_id"],
            "tool_call_id": row["tool_call_id"],
            "payload": payload,
            "created_at": _ts(row["created_at"]),
        },
    )


def artifact_record(row: Mapping[Any, Any]) -> ArtifactRecord:
    """Build an :class:`ArtifactRecord` from an ``artifacts`` row."""
    return written_artifact_record(row, _stored(row, "metadata_json"))


def written_artifact_record(row: Mapping[Any, Any], metadata: Any) -> ArtifactRecord:
    """The :class:`ArtifactRecord` of a row just written; ``metadata`` is its column as read."""
    return built(
        ArtifactRecord,
        {
            "artifact_id": row["artifact_id"],
            "session_id": row["session_id"],
            "agent_id": row["agent_id"],
            "run_id": row["run_id"],
            "node_id": row["node_id"],
            "tool_call_id": row["tool_call_id"],
            "path": row["path"],
            "filename": row["filename"],
            "mime_type": row["mime_type"],
            "size_bytes": row["size_bytes"],
            "summary": row["summary"],
            "metadata": metadata,
            "created_at": _ts(row["created_at"]),
        },
    )


def context_view(nodes: list[NodeRecord], token_count: int | None = None) -> ContextView:
    """A :class:`ContextView` of trusted nodes; ``token_count`` defaults to their tokens' sum."""
    if token_count is None:
        token_count = sum(node.token_count or 0 for node in nodes)
    return built(ContextView, {"nodes": nodes, "token_count": token_count})
