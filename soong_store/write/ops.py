"""Validated write operations: what a unit of work queues before anything touches the database.

Every argument a caller gives is checked once, with :mod:`soong_store.model.checks`, as its
operation is built (:class:`~soong_store.write.unit_of_work.UnitOfWork`'s ``add_*``,
:meth:`EventOp.build`), before the writer sees it: enums, ids, content blocks, JSON values. A
bad input raises an :class:`~soong_store.errors.InvalidArgument` at the call, with nothing
queued.

The spill (:func:`spill_large_json`): a :class:`~soong_store.model.content.JsonBlock` whose data
is over the byte or token threshold (:class:`~soong_store.files.artifact_op.SpillPolicy`)
becomes an artifact in the node's own unit of work; the stored block keeps a short summary of
the data's shape and the reference, so the context never carries the large JSON again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from soong_store.errors import InvalidArgument
from soong_store.files.artifact_op import ArtifactOp, SpillPolicy, drop_files
from soong_store.files.folder import StartFile
from soong_store.model import codec
from soong_store.model.checks import (
    check_event_type,
    check_optional_id,
    enum_value,
)
from soong_store.model.content import ContentBlock, JsonBlock, Place, encode_content
from soong_store.model.enums import EventLevel, NodeType, Role
from soong_store.model.ids import new_id

if TYPE_CHECKING:
    from sqlalchemy import Connection

NODE_CREATED = "node_created"


@dataclass(slots=True)
class EventOp:
    """A validated event waiting for its session's next ``seq``."""

    event_id: str
    event_type: str
    level: EventLevel = EventLevel.INFO
    agent_id: str | None = None
    run_id: str | None = None
    node_id: str | None = None
    tool_call_id: str | None = None
    payload_json: str | None = None
    payload: Any = None
    """The payload as a read of ``payload_json`` returns it: what the event's record holds."""

    @classmethod
    def build(
        cls,
        event_type: object,
        *,
        level: object = "info",
        agent_id: object = None,
        run_id: object = None,
        node_id: object = None,
        tool_call_id: object = None,
        payload: Any = None,
    ) -> EventOp:
        """Validate caller input into an event operation (raises before anything is queued)."""
        payload_json, payload_value = codec.encode_column(payload, what="event payload")
        return cls(
            event_id=new_id("evt"),
            event_type=check_event_type(event_type),
            level=enum_value(EventLevel, level, "event level"),
            agent_id=check_optional_id(agent_id, "agent"),
            run_id=check_optional_id(run_id, "run"),
            node_id=check_optional_id(node_id, "node"),
            tool_call_id=None
            if tool_call_id is None
            else codec.check_text(tool_call_id, "tool_call_id"),
            payload_json=payload_json,
            payload=payload_value,
        )

    @classmethod
    def own(
        cls,
        event_type: str,
        *,
        level: EventLevel = EventLevel.INFO,
        agent_id: str | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> EventOp:
        """An event the store writes itself (``node_created``, ``run_started`` ...).

        Its ids are the store's own or checked already, and its payload holds only strings,
        integers, ``None`` and dicts of them, which read back as they are: it is encoded, and
        nothing is checked or decoded again.
        """
        return cls(
            event_id=new_id("evt"),
            event_type=event_type,
            level=level,
            agent_id=agent_id,
            run_id=run_id,
            node_id=node_id,
            payload_json=codec.dumps_optional(payload, what="event payload"),
            payload=payload,
        )


@dataclass(slots=True)
class NodeOp:
    """A validated node waiting for its parent, agent and ``node_seq`` (``UnitOfWork.add_node``)."""

    node_id: str
    role: Role
    node_type: NodeType
    content_json: str
    content: list[ContentBlock]
    """The blocks as a read of ``content_json`` returns them: what the node's record holds."""
    agent_id: str | None
    run_id: str | None
    parent_id: str | None
    metadata_json: str | None
    metadata: Any
    """The metadata as a read of ``metadata_json`` returns it: what the node's record holds."""
    token_count: int | None
    event: EventOp | None = None
    """The event the caller asked for instead of ``node_created``."""
    created: EventOp | None = None
    """Its ``node_created`` event, built ahead: used unless ``event`` or another event of the
    unit names the node."""
    artifacts: list[ArtifactOp] = field(default_factory=list)
    artifact_refs: list[str] = field(default_factory=list)


def node_event(event: str | Mapping[str, Any], node_id: str) -> EventOp:
    """The event a node asked for instead of ``node_created``."""
    spec: dict[str, Any] = {"event_type": event} if isinstance(event, str) else dict(event)
    if "node_id" in spec or "agent_id" in spec or "run_id" in spec:
        raise InvalidArgument("a node's own event takes its node, agent and run ids")
    if "event_type" not in spec:
        raise InvalidArgument("a node's event needs an event_type")
    return EventOp.build(spec.pop("event_type"), **spec, node_id=node_id)


@dataclass(slots=True)
class StepOp:
    """A writer job of the caller's, run in the unit's transaction in its place among the ops.

    For an integration whose rows beside the nodes (its state, its checks of what the caller
    last read) must commit or roll back with them. The job must be re-runnable, as every writer
    job is; what it raises aborts the whole unit.
    """

    job: Callable[[Connection], object]


Op = NodeOp | EventOp | ArtifactOp | StepOp


def artifacts_of(ops: list[Op]) -> list[ArtifactOp]:
    """Every artifact a unit of work will write: explicit ones and spilled JSON."""
    found: list[ArtifactOp] = []
    for op in ops:
        if isinstance(op, ArtifactOp):
            found.append(op)
        elif isinstance(op, NodeOp):
            found.extend(op.artifacts)
    return found


_SUMMARY_CHARS = 600


def estimate_tokens(data: bytes) -> int:
    """Rough token count of UTF-8 text: ~4 bytes per token for ASCII, one per wide character."""
    text = data.decode("utf-8", errors="replace")
    wide = (len(data) - len(text)) // 2
    return math.ceil((len(text) - wide) / 4) + wide


def summarize_json(value: Any, size: int) -> str:
    """A short description of a JSON value's shape for the model: keys, lengths, first values."""
    head = f"JSON {_human(size)}: "
    return head + _shape(value, 3, _SUMMARY_CHARS - len(head))


def _human(size: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _shape(value: Any, depth: int, budget: int) -> str:
    if isinstance(value, dict):
        if depth == 0 or not value:
            return f"object with {len(value)} keys"
        parts: list[str] = []
        for key, item in value.items():
            part = f"{_short(key)}: {_shape(item, depth - 1, budget // 4)}"
            if sum(len(p) + 2 for p in parts) + len(part) > budget - 20:
                parts.append(f"... {len(value) - len(parts)} more keys")
                break
            parts.append(part)
        return _clip("{" + ", ".join(parts) + "}", budget)
    if isinstance(value, list):
        if not value:
            return "[]"
        if depth == 0:
            return f"list of {len(value)} items"
        first = _shape(value[0], depth - 1, budget // 2)
        return _clip(f"list of {len(value)} items, first: {first}", budget)
    if isinstance(value, str):
        return _short(value) + (f" ({len(value)} chars)" if len(value) > 40 else "")
    return _clip(repr(value), budget)


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _clip(text: str, budget: int) -> str:
    budget = max(budget, 16)
    return text if len(text) <= budget else text[: budget - 3] + "..."


def spill_large_json(
    session_id: str,
    blocks: list[ContentBlock],
    policy: SpillPolicy,
    start_file: StartFile,
) -> tuple[str, list[ContentBlock], list[ArtifactOp]]:
    """Encode a node's content, moving every JSON block over the thresholds to an artifact.

    Returns the ``content_json`` text, the blocks as a read returns them and the artifacts. Each
    JSON block's data is encoded once (:func:`~soong_store.model.content.encode_content`):
    its bytes are measured, and either written to the artifact's file or put into the text. A
    spilled block's file starts (``start_file``) before its bytes are checked for NaN, so the
    check overlaps the disk; a failure drops every file started here.
    """
    spilled: list[ArtifactOp] = []

    def spill(place: Place, block: JsonBlock, data: bytes) -> JsonBlock | None:
        if len(data) <= policy.max_bytes and (
            len(data) <= policy.max_tokens or estimate_tokens(data) <= policy.max_tokens
        ):
            return None
        op = ArtifactOp.build(
            session_id,
            data,
            policy=policy,
            mime_type="application/json",
            tool_call_id=None if place.owner is None else place.owner.tool_call_id,
        )
        op.event = False
        spilled.append(op)
        op.write = start_file(op.path, data)
        op.summary = summarize_json(block.data, len(data))  # bounded by construction
        codec.check_finite(data, block.data, what=f"{place.where}.data")
        return JsonBlock(summary=op.summary, artifact_ref=op.artifact_id)

    try:
        content_json, stored = encode_content(blocks, spill=spill)
    except BaseException:
        drop_files(spilled)
        raise
    return content_json, stored, spilled
