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
from typing import Any, TypeVar

from pydantic import BaseModel

from soong_store.model.content import (
    ArtifactRefBlock,
    ContentBlock,
    JsonBlock,
    RedactedBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    content_from_json,
    token_estimate,
)
from soong_store.model.enums import EventLevel, NodeType, Role
from soong_store.model.frozen import FrozenList, freeze
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
from soong_store.model.trusted import (
    LEVELS,
    NODE_TYPES,
    ROLES,
    built,
    damaged_content,
    new,
    set_slot,
    ts,
)

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
    "frozen_node",
    "node_record",
    "node_tokens",
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
    """What the model gets: the active path cut at its last compaction, and its token total.

    ``nodes`` is read-only (a :class:`~soong_store.model.frozen.FrozenList`): the path cache
    shares it, and the records in it, with later reads. ``token_count`` adds up the nodes'
    counts, a node without one counted as :func:`~soong_store.model.content.token_estimate`;
    ``estimated`` says whether any was. ``omitted``: the nodes of the cut path that a
    ``max_tokens`` read left out (0 for a read without ``max_tokens``).
    """

    nodes: list[NodeRecord]
    token_count: int
    omitted: int = 0
    estimated: bool = False


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


def context_view(
    nodes: list[NodeRecord],
    token_count: int | None = None,
    *,
    omitted: int = 0,
    estimated: bool | None = None,
) -> ContextView:
    """A :class:`ContextView` of trusted nodes; ``token_count`` defaults to their tokens' sum.

    ``nodes`` is kept when it is read-only already (a path the cache holds), else copied into
    a :class:`~soong_store.model.frozen.FrozenList`. Without ``token_count``, ``estimated`` is
    found with the sum; with it, the caller says.
    """
    if token_count is None:
        token_count = sum(node_tokens(node) for node in nodes)
        estimated = any(node.token_count is None for node in nodes)
    if type(nodes) is not FrozenList:
        nodes = FrozenList(nodes)
    fields = {
        "nodes": nodes,
        "token_count": token_count,
        "omitted": omitted,
        "estimated": bool(estimated),
    }
    return built(ContextView, fields)


def node_tokens(node: NodeRecord) -> int:
    """A node's ``token_count``, else its :func:`~soong_store.model.content.token_estimate`."""
    count = node.token_count
    return token_estimate(node.content) if count is None else count


def frozen_node(node: NodeRecord, *, fresh: bool = False) -> NodeRecord:
    """``node`` as nothing can change it: what the path cache holds and shares.

    The record is frozen already; this makes its content list, the lists and dicts inside its
    blocks (JSON data, tool arguments, a tool result's items) and its metadata read-only
    copies (:func:`~soong_store.model.frozen.freeze`); blocks of text and scalars are kept.
    ``fresh``: ``node`` was just built by a read and nobody else holds it, so it is changed
    in place (a copy of its fields and blocks costs as much again); else it is left as it
    is, since its writer may still hold it, and a copy is returned.
    """
    fields = node.__dict__ if fresh else dict(node.__dict__)
    blocks = node.content
    if any(type(block) not in _PLAIN_BLOCKS for block in blocks):
        blocks = [_frozen_block(block, fresh) for block in blocks]
    fields["content"] = FrozenList(blocks)
    metadata = fields["metadata"]
    if type(metadata) in _CONTAINERS:
        fields["metadata"] = freeze(metadata)
    return node if fresh else built(NodeRecord, fields)


_CONTAINERS = frozenset({dict, list})
_PLAIN_BLOCKS = frozenset({TextBlock, ArtifactRefBlock, RedactedBlock})
"""The blocks that hold only text and scalars: kept as they are."""
BlockT = TypeVar("BlockT", bound=BaseModel)


def _frozen_block(block: ContentBlock, fresh: bool) -> ContentBlock:
    if isinstance(block, JsonBlock):
        data = block.data
        return _with(block, "data", freeze(data), fresh) if type(data) in _CONTAINERS else block
    if isinstance(block, ToolCallBlock):
        arguments = block.arguments
        if type(arguments) in _CONTAINERS:
            return _with(block, "arguments", freeze(arguments), fresh)
        return block
    if isinstance(block, ToolResultBlock):
        items = FrozenList([_frozen_block(item, fresh) for item in block.content])
        return _with(block, "content", items, fresh)
    return block


def _with(block: BlockT, name: str, value: Any, fresh: bool) -> BlockT:
    """``block`` with one field replaced (in place when ``fresh``), as ``model_copy`` but cheap."""
    if fresh:
        block.__dict__[name] = value
        return block
    out = new(type(block))
    fields = dict(block.__dict__)
    fields[name] = value
    set_slot(out, "__dict__", fields)
    set_slot(out, "__pydantic_fields_set__", set(block.model_fields_set))
    set_slot(out, "__pydantic_extra__", None)
    set_slot(out, "__pydantic_private__", None)
    return out
