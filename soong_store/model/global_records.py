"""Records of the global tables: sessions, agents, runs and artifacts, none of them with content.

Apart from :mod:`soong_store.model.records` (nodes, events, the context) because none of these
holds content: a listing of sessions builds them without importing the content blocks, which
Pydantic takes longer to build than anything else a listing imports. Built without validation,
as every read builds its records (:func:`~soong_store.model.trusted.built`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from soong_store.model import codec
from soong_store.model.enums import AgentStatus, AgentType, EndReason, RunStatus, SessionStatus
from soong_store.model.trusted import built, damaged_column, ts


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
    owner: str | None = None
    key: str | None = None


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


def stored(row: Mapping[Any, Any], column: str) -> Any:
    """Decode a JSON column; text that is not JSON means the stored data is damaged."""
    try:
        return codec.loads(row[column])
    except ValueError as exc:
        raise damaged_column(column, exc) from exc


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
            "metadata": stored(row, "metadata_json"),
            "created_at": ts(row["created_at"]),
            "updated_at": ts(row["updated_at"]),
            "owner": row["owner"],
            "key": row["key"],
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
            "result": stored(row, "result_json"),
            "metadata": stored(row, "metadata_json"),
            "created_at": ts(row["created_at"]),
            "updated_at": ts(row["updated_at"]),
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
            "usage": stored(row, "usage_json"),
            "error": stored(row, "error_json"),
            "metadata": stored(row, "metadata_json"),
            "created_at": ts(row["created_at"]),
            "updated_at": ts(row["updated_at"]),
        },
    )


def artifact_record(row: Mapping[Any, Any]) -> ArtifactRecord:
    """Build an :class:`ArtifactRecord` from an ``artifacts`` row."""
    return written_artifact_record(row, stored(row, "metadata_json"))


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
            "created_at": ts(row["created_at"]),
        },
    )


def agent_labels(agents: Sequence[AgentRecord], root_agent_id: str) -> dict[str, str]:
    """Short names for a session's agents: the root's type, then ``sub1``, ``fork1`` ..."""
    labels: dict[str, str] = {}
    counts: dict[str, int] = {}
    for agent in agents:
        kind = str(agent.agent_type)
        if agent.agent_id == root_agent_id:
            labels[agent.agent_id] = kind
        else:
            counts[kind] = counts.get(kind, 0) + 1
            labels[agent.agent_id] = f"{kind}{counts[kind]}"
    return labels
