"""Records built straight from the driver's row tuples: the reads that return many rows.

A long path or a timeline page returns each row as a tuple of the columns it selected; building
records from those, in one loop per read, skips a dict per row and a call per field. The
records equal what :func:`~soong_store.model.records.node_record` and
:func:`~soong_store.model.records.event_record` build from the same rows; content is still
validated (a row edited on disk raises ``StorageError``, never a half-built record).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from soong_store.model import codec
from soong_store.model.enums import EventLevel, NodeType, Role
from soong_store.model.trusted import (
    LEVELS,
    NODE_TYPES,
    ROLES,
    all_fields,
    damaged_column,
    damaged_content,
    new,
    set_slot,
    ts,
)

if TYPE_CHECKING:  # imported by the reads that build records: the column lists need neither
    from soong_store.model.records import EventRecord, NodeRecord

NODE_COLUMNS = (
    "node_id",
    "node_seq",
    "parent_id",
    "agent_id",
    "run_id",
    "role",
    "node_type",
    "content_json",
    "metadata_json",
    "token_count",
    "created_at",
)
"""The columns of ``nodes_<sid>`` :func:`node_records` takes, in the order it takes them."""


def node_records(session_id: str, rows: Iterable[Sequence[Any]]) -> list[NodeRecord]:
    """:func:`node_record` of rows given as tuples of :data:`NODE_COLUMNS`, as the driver returns.

    The hot read (a long path): no dict per row, and the loop inlined. What it builds equals
    what :func:`node_record` builds from the same row, content validated the same way.
    """
    from soong_store.model.content import content_from_json
    from soong_store.model.records import NodeRecord

    out: list[NodeRecord] = []
    append = out.append
    validate, loads, stamp = content_from_json, codec.loads, ts
    roles, types = ROLES, NODE_TYPES
    fields_set = all_fields(NodeRecord)
    for node_id, seq, parent, agent, run, role, kind, content, metadata, tokens, at in rows:
        try:
            blocks = validate(content)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise damaged_content(session_id, node_id, exc) from exc
        if metadata is not None:
            try:
                metadata = loads(metadata)
            except ValueError as exc:
                raise damaged_column("metadata_json", exc) from exc
        record = new(NodeRecord)
        set_slot(
            record,
            "__dict__",
            {
                "session_id": session_id,
                "node_id": node_id,
                "node_seq": seq,
                "parent_id": parent,
                "agent_id": agent,
                "run_id": run,
                "role": roles.get(role) or Role(role),
                "node_type": types.get(kind) or NodeType(kind),
                "content": blocks,
                "metadata": metadata,
                "token_count": tokens,
                "created_at": stamp(at),
            },
        )
        set_slot(record, "__pydantic_fields_set__", fields_set)
        set_slot(record, "__pydantic_extra__", None)
        set_slot(record, "__pydantic_private__", None)
        append(record)
    return out


EVENT_COLUMNS = (
    "event_id",
    "seq",
    "run_seq",
    "agent_id",
    "run_id",
    "level",
    "event_type",
    "node_id",
    "tool_call_id",
    "payload_json",
    "created_at",
)
"""The columns of ``events_<sid>`` :func:`event_records` takes, in the order it takes them."""


def event_records(session_id: str, rows: Iterable[Sequence[Any]]) -> list[EventRecord]:
    """:func:`event_record` of rows given as tuples of :data:`EVENT_COLUMNS` (a timeline page)."""
    from soong_store.model.records import EventRecord

    out: list[EventRecord] = []
    append = out.append
    loads, stamp, levels = codec.loads, ts, LEVELS
    fields_set = all_fields(EventRecord)
    for event_id, seq, run_seq, agent, run, level, kind, node, call, payload, at in rows:
        if payload is not None:
            try:
                payload = loads(payload)
            except ValueError as exc:
                raise damaged_column("payload_json", exc) from exc
        record = new(EventRecord)
        set_slot(
            record,
            "__dict__",
            {
                "session_id": session_id,
                "event_id": event_id,
                "seq": seq,
                "run_seq": run_seq,
                "agent_id": agent,
                "run_id": run,
                "level": levels.get(level) or EventLevel(level),
                "event_type": kind,
                "node_id": node,
                "tool_call_id": call,
                "payload": payload,
                "created_at": stamp(at),
            },
        )
        set_slot(record, "__pydantic_fields_set__", fields_set)
        set_slot(record, "__pydantic_extra__", None)
        set_slot(record, "__pydantic_private__", None)
        append(record)
    return out
