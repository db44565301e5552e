"""Records: frozen Pydantic models of stored rows, JSON columns decoded.

Nodes, events and the context are defined here; the records of the global tables (sessions,
agents, runs, artifacts) in :mod:`soong_store.model.global_records`, which does not import the
content blocks, and are named here too, so that either module serves a caller that has content
loaded anyway.

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

from soong_store.model.content import ContentBlock
from soong_store.model.content_json import content_from_json
from soong_store.model.enums import EventLevel, NodeType, Role
from soong_store.model.global_records import (
    AgentRecord,
    ArtifactRecord,
    Record,
    RunRecord,
    SessionRecord,
    agent_record,
    artifact_record,
    run_record,
    session_record,
    written_artifact_record,
)
from soong_store.model.global_records import stored as _stored
from soong_store.model.trusted import LEVELS, NODE_TYPES, ROLES, built, damaged_content, ts

__all__ = [
    "AgentRecord",
    "ArtifactRecord",
    "ContextView",
    "EventRecord",
    "NodeRecord",
    "Record",
    "RunRecord",
    "SessionRecord",
    "agent_record",
    "artifact_record",
    "context_view",
    "event_record",
    "node_record",
    "run_record",
    "session_record",
    "written_artifact_record",
    "written_event_record",
    "written_node_record",
]


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


class ContextView(Record):
    """What the model gets: the active path cut at its last compaction, and its token total."""

    nodes: list[NodeRecord]
    token_count: int


def _stored_content(session_id: str, row: Mapping[Any, Any]) -> list[ContentBlock]:
    try:
        return content_from_json(row["content_json"])
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise damaged_content(session_id, row["node_id"], exc) from exc


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
            "created_at": ts(row["created_at"]),
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
            "created_at": ts(row["created_at"]),
        },
    )


def context_view(nodes: list[NodeRecord], token_count: int | None = None) -> ContextView:
    """A :class:`ContextView` of trusted nodes; ``token_count`` defaults to their tokens' sum."""
    if token_count is None:
        token_count = sum(node.token_count or 0 for node in nodes)
    return built(ContextView, {"nodes": nodes, "token_count": token_count})
