"""Validated write operations: what a unit of work queues before anything touches the database.

Every argument a caller gives is checked here, once, before the writer sees it: enums, ids,
content blocks (and the spill of large JSON into artifacts), JSON values. A bad input raises an
:class:`~soong_store.errors.InvalidArgument` at the call, with nothing queued.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from soong_store.errors import InvalidArgument
from soong_store.files.artifact_op import ArtifactOp, SpillPolicy
from soong_store.files.folder import StartFile
from soong_store.model import codec
from soong_store.model.checks import (
    check_event_type,
    check_optional_id,
    check_token_count,
    enum_value,
)
from soong_store.model.enums import EventLevel, NodeType, Role
from soong_store.model.ids import new_id

if TYPE_CHECKING:  # the content blocks are imported by the first node built, not by the checks
    from sqlalchemy import Connection

    from soong_store.model.content import ContentBlock


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
    """A validated node waiting for its parent, agent and ``node_seq``."""

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

    @classmethod
    def build(
        cls,
        session_id: str,
        role: object,
        node_type: object,
        content: object,
        *,
        policy: SpillPolicy,
        start_file: StartFile,
        agent_id: object = None,
        run_id: object = None,
        parent_id: object = None,
        metadata: Any = None,
        token_count: object = None,
        event: str | Mapping[str, Any] | None = None,
    ) -> NodeOp:
        """Validate caller input into a node operation (raises before anything is queued).

        Large JSON blocks are moved to artifacts here, so the node's stored content is final;
        their files start with ``start_file``. Everything else is checked first, so that only
        the content itself can fail once a file is on its way (and then the files are dropped).
        """
        from soong_store.files.spill import spill_large_json
        from soong_store.model.content import artifact_refs, validate_content

        node_id = new_id("node")
        role_value = enum_value(Role, role, "role")
        type_value = enum_value(NodeType, node_type, "node type")
        agent = check_optional_id(agent_id, "agent")
        run = check_optional_id(run_id, "run")
        parent = check_optional_id(parent_id, "node")
        metadata_json, metadata_value = codec.encode_column(metadata, what="node metadata")
        tokens = check_token_count(token_count)
        own_event = None if event is None else _node_event(event, node_id)
        created = EventOp.own(NODE_CREATED, node_id=node_id) if own_event is None else None
        content_json, stored, spilled = spill_large_json(
            session_id, validate_content(content), policy, start_file
        )
        for artifact in spilled:
            artifact.node_id = node_id
        return cls(
            node_id=node_id,
            role=role_value,
            node_type=type_value,
            content_json=content_json,
            content=stored,
            agent_id=agent,
            run_id=run,
            parent_id=parent,
            metadata_json=metadata_json,
            metadata=metadata_value,
            token_count=tokens,
            event=own_event,
            created=created,
            artifacts=spilled,
            artifact_refs=artifact_refs(stored),
        )


def _node_event(event: str | Mapping[str, Any], node_id: str) -> EventOp:
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
