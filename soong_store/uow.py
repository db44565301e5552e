"""The unit of work: nodes and events of one session that commit together or not at all.

:class:`UnitOfWork` is what ``store.transaction(session_id)`` hands out. Its ``add_node`` and
``add_event`` validate their input at once (bad input raises there, before anything is queued)
and return the new id; nothing touches the database until the block ends without an error, when
the whole unit goes to the writer as one job. Leaving the block by an exception discards it.

:class:`SessionWriter` is the job side: inside the writer's transaction it checks the session,
assigns ``node_seq``, ``seq`` and ``run_seq`` (dense, from the current maxima, under the write
lock), resolves default parents and agents, enforces the branch rule, and moves the session's
active node and the runs' start/end nodes. Lifecycle writes (runs, agents, switches) use it too,
so every event of a session gets its numbers in one place.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy import Connection, func, select, update

from soong_store import _json
from soong_store.artifacts import ArtifactOp, SpillPolicy, spill_large_json
from soong_store.content import artifact_refs, content_to_json, validate_content
from soong_store.enums import (
    TERMINAL_RUN_STATUSES,
    AgentType,
    EventLevel,
    NodeType,
    Role,
    SessionStatus,
)
from soong_store.errors import (
    BranchError,
    InvalidArgument,
    InvalidTransition,
    NotFound,
    SessionArchived,
)
from soong_store.ids import check_optional_id, new_id, utc_now
from soong_store.records import (
    ArtifactRecord,
    EventRecord,
    NodeRecord,
    artifact_record,
    event_record,
    node_record,
)
from soong_store.schema.models import (
    agents_table,
    artifacts_table,
    runs_table,
    sessions_table,
)
from soong_store.schema.session_tables import SessionTables, session_tables

E = TypeVar("E", bound=StrEnum)

NODE_CREATED = "node_created"
_MAX_EVENT_TYPE = 128

sessions_t = sessions_table
agents_t = agents_table
runs_t = runs_table
artifacts_t = artifacts_table


def enum_value(enum: type[E], value: object, what: str) -> E:
    """Convert ``value`` to a member of ``enum`` or raise :class:`InvalidArgument` naming it."""
    try:
        return enum(value)  # type: ignore[arg-type]  # anything else is refused below
    except ValueError:
        allowed = ", ".join(member.value for member in enum)
        raise InvalidArgument(f"invalid {what} {value!r}: expected one of {allowed}") from None


def check_event_type(event_type: object) -> str:
    """An event type is free text, but a short non-empty one."""
    if not isinstance(event_type, str) or not 0 < len(event_type) <= _MAX_EVENT_TYPE:
        raise InvalidArgument(
            f"invalid event type {event_type!r}: expected 1-{_MAX_EVENT_TYPE} characters"
        )
    return event_type


def check_token_count(value: object) -> int | None:
    """``token_count`` is a non-negative integer or ``None``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"invalid token_count {value!r}: expected an integer >= 0")
    return value


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
        if tool_call_id is not None and not isinstance(tool_call_id, str):
            raise InvalidArgument(f"invalid tool_call_id {tool_call_id!r}: expected a string")
        return cls(
            event_id=new_id("evt"),
            event_type=check_event_type(event_type),
            level=enum_value(EventLevel, level, "event level"),
            agent_id=check_optional_id(agent_id, "agent"),
            run_id=check_optional_id(run_id, "run"),
            node_id=check_optional_id(node_id, "node"),
            tool_call_id=tool_call_id,
            payload_json=_json.dumps_optional(payload, what="event payload"),
        )


@dataclass(slots=True)
class NodeOp:
    """A validated node waiting for its parent, agent and ``node_seq``."""

    node_id: str
    role: Role
    node_type: NodeType
    content_json: str
    agent_id: str | None
    run_id: str | None
    parent_id: str | None
    metadata_json: str | None
    token_count: int | None
    event: EventOp | None = None
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
        agent_id: object = None,
        run_id: object = None,
        parent_id: object = None,
        metadata: Any = None,
        token_count: object = None,
        event: str | Mapping[str, Any] | None = None,
    ) -> NodeOp:
        """Validate caller input into a node operation (raises before anything is queued).

        Large JSON blocks are moved to artifacts here, so the node's stored content is final.
        """
        role_value = enum_value(Role, role, "role")
        type_value = enum_value(NodeType, node_type, "node type")
        blocks, spilled = spill_large_json(session_id, validate_content(content), policy)
        op = cls(
            node_id=new_id("node"),
            role=role_value,
            node_type=type_value,
            content_json=content_to_json(blocks),
            agent_id=check_optional_id(agent_id, "agent"),
            run_id=check_optional_id(run_id, "run"),
            parent_id=check_optional_id(parent_id, "node"),
            metadata_json=_json.dumps_optional(metadata, what="node metadata"),
            token_count=check_token_count(token_count),
            artifacts=spilled,
            artifact_refs=artifact_refs(blocks),
        )
        for artifact in spilled:
            artifact.node_id = op.node_id
        if event is not None:
            spec: dict[str, Any] = {"event_type": event} if isinstance(event, str) else dict(event)
            if "node_id" in spec or "agent_id" in spec or "run_id" in spec:
                raise InvalidArgument("a node's own event takes its node, agent and run ids")
            if "event_type" not in spec:
                raise InvalidArgument("a node's event needs an event_type")
            op.event = EventOp.build(spec.pop("event_type"), **spec, node_id=op.node_id)
        return op


Op = NodeOp | EventOp | ArtifactOp


@dataclass(slots=True)
class Committed:
    """What one unit of work wrote, as records with their final numbers."""

    nodes: list[NodeRecord] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    artifacts: list[ArtifactRecord] = field(default_factory=list)


def artifacts_of(ops: list[Op]) -> list[ArtifactOp]:
    """Every artifact a unit of work will write: explicit ones and spilled JSON."""
    found: list[ArtifactOp] = []
    for op in ops:
        if isinstance(op, ArtifactOp):
            found.append(op)
        elif isinstance(op, NodeOp):
            found.extend(op.artifacts)
    return found


@dataclass(slots=True)
class _RunState:
    row: dict[str, Any]
    next_run_seq: int | None = None
    dirty: bool = False


@dataclass(slots=True)
class SessionWriter:
    """Writes to one session inside the writer's transaction, keeping its counters in step."""

    connection: Connection
    tables: SessionTables
    session: dict[str, Any]
    _next_node_seq: int | None = None
    _next_seq: int | None = None
    _runs: dict[str, _RunState] = field(default_factory=dict)
    _agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    _session_dirty: bool = False

    @classmethod
    def open(
        cls, connection: Connection, session_id: str, *, writable: bool = True
    ) -> SessionWriter:
        """Load the session (``NotFound``) and, when writing, refuse an archived one."""
        row = (
            connection.execute(select(sessions_t).where(sessions_t.c.session_id == session_id))
            .mappings()
            .first()
        )
        if row is None:
            raise NotFound(f"no session {session_id!r}", session_id=session_id)
        if writable and row["status"] == SessionStatus.ARCHIVED:
            raise SessionArchived(
                f"session {session_id!r} is archived and takes no writes", session_id=session_id
            )
        return cls(connection, session_tables(session_id), dict(row))

    @property
    def session_id(self) -> str:
        """The id of the session being written."""
        return str(self.session["session_id"])

    def agent(self, agent_id: str) -> dict[str, Any]:
        """The agent's row; ``NotFound`` unless it belongs to this session."""
        if agent_id not in self._agents:
            row = (
                self.connection.execute(select(agents_t).where(agents_t.c.agent_id == agent_id))
                .mappings()
                .first()
            )
            if row is None or row["session_id"] != self.session_id:
                raise NotFound(
                    f"no agent {agent_id!r} in session {self.session_id!r}", agent_id=agent_id
                )
            self._agents[agent_id] = dict(row)
        return self._agents[agent_id]

    def run(self, run_id: str) -> dict[str, Any]:
        """The run's row as this transaction sees it; ``NotFound`` unless it is this session's."""
        return self._run_state(run_id).row

    def _run_state(self, run_id: str) -> _RunState:
        if run_id not in self._runs:
            row = (
                self.connection.execute(select(runs_t).where(runs_t.c.run_id == run_id))
                .mappings()
                .first()
            )
            if row is None or row["session_id"] != self.session_id:
                raise NotFound(f"no run {run_id!r} in session {self.session_id!r}", run_id=run_id)
            self._runs[run_id] = _RunState(dict(row))
        return self._runs[run_id]

    def node_exists(self, node_id: str) -> bool:
        """Whether the node is in this session."""
        nodes = self.tables.nodes
        found = self.connection.execute(
            select(nodes.c.node_id).where(nodes.c.node_id == node_id)
        ).first()
        return found is not None

    def require_node(self, node_id: str) -> None:
        """Raise ``NotFound`` unless the node is in this session."""
        if not self.node_exists(node_id):
            raise NotFound(f"no node {node_id!r} in session {self.session_id!r}", node_id=node_id)

    def _has_child(self, node_id: str) -> bool:
        nodes = self.tables.nodes
        found = self.connection.execute(
            select(nodes.c.node_id).where(nodes.c.parent_id == node_id).limit(1)
        ).first()
        return found is not None

    def _latest_node_of(self, agent_id: str) -> str | None:
        nodes = self.tables.nodes
        return self.connection.execute(
            select(nodes.c.node_id)
            .where(nodes.c.agent_id == agent_id)
            .order_by(nodes.c.node_seq.desc())
            .limit(1)
        ).scalar()

    def _default_parent(self, agent: dict[str, Any], run: dict[str, Any] | None) -> str | None:
        if agent["agent_id"] == self.session["root_agent_id"]:
            active: str | None = self.session["active_node_id"]
            return active
        if run is not None and run["end_node_id"] is not None:
            end: str | None = run["end_node_id"]
            return end
        latest = self._latest_node_of(agent["agent_id"])
        if latest is not None:
            return latest
        if agent["agent_type"] == AgentType.FORK:
            fork_point: str | None = agent["fork_from_node_id"]
            return fork_point
        return None

    def add_node(self, op: NodeOp) -> dict[str, Any]:
        """Insert a node after resolving its agent, parent and branch; return its row."""
        run = None
        if op.run_id is not None:
            state = self._run_state(op.run_id)
            run = state.row
            if run["status"] in TERMINAL_RUN_STATUSES:
                raise InvalidTransition(
                    f"run {op.run_id!r} is {run['status']}: it takes no more nodes",
                    run_id=op.run_id,
                )
        agent_id = op.agent_id or (run["agent_id"] if run else self.session["root_agent_id"])
        if run is not None and run["agent_id"] != agent_id:
            raise InvalidArgument(
                f"node agent {agent_id!r} is not the agent of run {op.run_id!r}",
                agent_id=agent_id,
                run_id=op.run_id,
            )
        agent = self.agent(agent_id)
        spilled = {artifact.artifact_id for artifact in op.artifacts}
        for artifact_id in op.artifact_refs:
            if artifact_id not in spilled:
                self.require_artifact(artifact_id)
        parent_id = op.parent_id
        if parent_id is not None:
            self.require_node(parent_id)
        else:
            parent_id = self._default_parent(agent, run)
        if (
            parent_id is not None
            and self._has_child(parent_id)
            and (op.role != Role.USER or op.node_type != NodeType.MESSAGE)
        ):
            raise BranchError(
                f"node {parent_id!r} already has a child: only a user message may open a branch, "
                f"got role={op.role} node_type={op.node_type}",
                parent_id=parent_id,
            )
        row = {
            "node_id": op.node_id,
            "node_seq": self._take_node_seq(),
            "parent_id": parent_id,
            "agent_id": agent_id,
            "run_id": op.run_id,
            "role": str(op.role),
            "node_type": str(op.node_type),
            "content_json": op.content_json,
            "metadata_json": op.metadata_json,
            "token_count": op.token_count,
            "created_at": utc_now(),
        }
        self.connection.execute(self.tables.nodes.insert(), row)
        if agent_id == self.session["root_agent_id"]:
            self.session["active_node_id"] = op.node_id
        self._session_dirty = True
        if run is not None and op.run_id is not None:
            if run["start_node_id"] is None:
                run["start_node_id"] = op.node_id
            run["end_node_id"] = op.node_id
            self._runs[op.run_id].dirty = True
        return row

    def add_event(self, op: EventOp) -> dict[str, Any]:
        """Insert an event with the session's next ``seq`` (and the run's next ``run_seq``)."""
        agent_id = op.agent_id
        run_seq = None
        if op.run_id is not None:
            state = self._run_state(op.run_id)
            agent_id = agent_id or state.row["agent_id"]
            if state.next_run_seq is None:
                events = self.tables.events
                current = self.connection.execute(
                    select(func.max(events.c.run_seq)).where(events.c.run_id == op.run_id)
                ).scalar()
                state.next_run_seq = (current or 0) + 1
            run_seq = state.next_run_seq
            state.next_run_seq += 1
        if agent_id is not None:
            self.agent(agent_id)
        if op.node_id is not None:
            self.require_node(op.node_id)
        row = {
            "event_id": op.event_id,
            "seq": self._take_seq(),
            "run_seq": run_seq,
            "agent_id": agent_id,
            "run_id": op.run_id,
            "level": str(op.level),
            "event_type": op.event_type,
            "node_id": op.node_id,
            "tool_call_id": op.tool_call_id,
            "payload_json": op.payload_json,
            "created_at": utc_now(),
        }
        self.connection.execute(self.tables.events.insert(), row)
        return row

    def require_artifact(self, artifact_id: str) -> None:
        """Raise ``NotFound`` unless the artifact exists in this session."""
        owner = self.connection.execute(
            select(artifacts_t.c.session_id).where(artifacts_t.c.artifact_id == artifact_id)
        ).scalar()
        if owner != self.session_id:
            raise NotFound(
                f"no artifact {artifact_id!r} in session {self.session_id!r}",
                artifact_id=artifact_id,
            )

    def add_artifact(self, op: ArtifactOp, node: dict[str, Any] | None = None) -> dict[str, Any]:
        """Insert an artifact row (its file is already written); links must be this session's."""
        if node is not None:
            op.agent_id, op.run_id = node["agent_id"], node["run_id"]
        if op.agent_id is not None:
            self.agent(op.agent_id)
        if op.run_id is not None:
            self.run(op.run_id)
        if op.node_id is not None and node is None:
            self.require_node(op.node_id)
        row = {
            "artifact_id": op.artifact_id,
            "session_id": self.session_id,
            "agent_id": op.agent_id,
            "run_id": op.run_id,
            "node_id": op.node_id,
            "tool_call_id": op.tool_call_id,
            "path": op.path,
            "filename": op.filename,
            "mime_type": op.mime_type,
            "size_bytes": len(op.data),
            "summary": op.summary,
            "metadata_json": op.metadata_json,
            "created_at": utc_now(),
        }
        self.connection.execute(artifacts_t.insert(), row)
        return row

    def lifecycle_event(self, event_type: str, **fields: Any) -> dict[str, Any]:
        """Write an event of the store's own (``run_started``, ``node_switched`` ...)."""
        return self.add_event(EventOp.build(event_type, **fields))

    def set_active(self, node_id: str | None) -> None:
        """Move the session's active node (written at :meth:`finish`)."""
        self.session["active_node_id"] = node_id
        self._session_dirty = True

    def update_run(self, run_id: str, **values: Any) -> dict[str, Any]:
        """Change a run's row (written at :meth:`finish`)."""
        state = self._run_state(run_id)
        state.row.update(values)
        state.dirty = True
        return state.row

    def finish(self) -> None:
        """Write back the session's and runs' changed columns."""
        now = utc_now()
        if self._session_dirty:
            self.connection.execute(
                update(sessions_t)
                .where(sessions_t.c.session_id == self.session_id)
                .values(active_node_id=self.session["active_node_id"], updated_at=now)
            )
            self.session["updated_at"] = now
        for run_id, state in self._runs.items():
            if state.dirty:
                values = {k: v for k, v in state.row.items() if k not in ("run_id", "created_at")}
                values["updated_at"] = now
                self.connection.execute(update(runs_t).where(runs_t.c.run_id == run_id), values)
                state.row["updated_at"] = now
                state.dirty = False

    def _take_node_seq(self) -> int:
        if self._next_node_seq is None:
            nodes = self.tables.nodes
            current = self.connection.execute(select(func.max(nodes.c.node_seq))).scalar()
            self._next_node_seq = (current or 0) + 1
        seq = self._next_node_seq
        self._next_node_seq += 1
        return seq

    def _take_seq(self) -> int:
        if self._next_seq is None:
            events = self.tables.events
            current = self.connection.execute(select(func.max(events.c.seq))).scalar()
            self._next_seq = (current or 0) + 1
        seq = self._next_seq
        self._next_seq += 1
        return seq


def apply_ops(connection: Connection, session_id: str, ops: list[Op]) -> Committed:
    """The writer job of a unit of work: write every op in order, each node with its event.

    A node's spilled artifacts are inserted right after it; their rows take its agent and run.
    """
    writer = SessionWriter.open(connection, session_id)
    named = {op.node_id for op in ops if isinstance(op, EventOp) and op.node_id is not None}
    out = Committed()
    for op in ops:
        if isinstance(op, ArtifactOp):
            row = writer.add_artifact(op)
            out.artifacts.append(artifact_record(row))
            if op.event:
                created = EventOp.build(
                    "artifact_created",
                    agent_id=op.agent_id,
                    run_id=op.run_id,
                    node_id=op.node_id,
                    payload={"artifact_id": op.artifact_id, "size_bytes": len(op.data)},
                )
                out.events.append(event_record(session_id, writer.add_event(created)))
        elif isinstance(op, NodeOp):
            row = writer.add_node(op)
            for artifact in op.artifacts:
                out.artifacts.append(artifact_record(writer.add_artifact(artifact, node=row)))
            out.nodes.append(node_record(session_id, row))
            event = op.event
            if event is None and op.node_id not in named:
                event = EventOp.build(NODE_CREATED, node_id=op.node_id)
            if event is not None:
                event.agent_id, event.run_id = row["agent_id"], row["run_id"]
                out.events.append(event_record(session_id, writer.add_event(event)))
        else:
            out.events.append(event_record(session_id, writer.add_event(op)))
    writer.finish()
    return out


class UnitOfWork:
    """Nodes and events of one session gathered in a block and committed as one transaction.

    Use it through ``store.transaction(session_id)``::

        async with store.transaction(sid) as tx:
            nid = tx.add_node("assistant", "message", [...])
            tx.add_event("tool_failed", node_id=nid, level="error")
        tx.nodes, tx.events   # the committed records, with their seqs

    ``add_node``/``add_event``/``add_artifact`` validate at once and return the new id; the
    sequence numbers are known only after the commit. Every node gets a ``node_created`` event
    unless an event of the same unit names it (or ``event=`` says which event it gets).
    Artifact files are written just before the commit and removed again if it fails.
    """

    def __init__(
        self,
        session_id: str,
        submit: Callable[[list[Op]], Awaitable[Committed]],
        policy: SpillPolicy,
    ) -> None:
        self.session_id = session_id
        self._submit = submit
        self._policy = policy
        self._ops: list[Op] = []
        self._done = False
        self.nodes: list[NodeRecord] = []
        self.events: list[EventRecord] = []
        self.artifacts: list[ArtifactRecord] = []

    def add_node(
        self,
        role: Role | str,
        node_type: NodeType | str,
        content: object,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        parent_id: str | None = None,
        metadata: Any = None,
        token_count: int | None = None,
        event: str | Mapping[str, Any] | None = None,
    ) -> str:
        """Queue a node; return its id at once."""
        self._check_open()
        op = NodeOp.build(
            self.session_id,
            role,
            node_type,
            content,
            policy=self._policy,
            agent_id=agent_id,
            run_id=run_id,
            parent_id=parent_id,
            metadata=metadata,
            token_count=token_count,
            event=event,
        )
        self._ops.append(op)
        return op.node_id

    def add_event(
        self,
        event_type: str,
        *,
        level: EventLevel | str = "info",
        agent_id: str | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        tool_call_id: str | None = None,
        payload: Any = None,
    ) -> str:
        """Queue an event; return its id at once."""
        self._check_open()
        op = EventOp.build(
            event_type,
            level=level,
            agent_id=agent_id,
            run_id=run_id,
            node_id=node_id,
            tool_call_id=tool_call_id,
            payload=payload,
        )
        self._ops.append(op)
        return op.event_id

    def add_artifact(
        self,
        data: bytes,
        *,
        filename: str | None = None,
        mime_type: str | None = None,
        summary: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        tool_call_id: str | None = None,
        metadata: Any = None,
    ) -> str:
        """Queue an artifact (e.g. an attachment a later node references); return its id."""
        self._check_open()
        op = ArtifactOp.build(
            self.session_id,
            data,
            policy=self._policy,
            filename=filename,
            mime_type=mime_type,
            summary=summary,
            agent_id=agent_id,
            run_id=run_id,
            node_id=node_id,
            tool_call_id=tool_call_id,
            metadata=metadata,
        )
        self._ops.append(op)
        return op.artifact_id

    async def commit(self) -> None:
        """Send the unit to the writer as one job; called when the ``async with`` block ends."""
        self._check_open()
        self._done = True
        if self._ops:
            committed = await self._submit(self._ops)
            self.nodes, self.events = committed.nodes, committed.events
            self.artifacts = committed.artifacts

    def discard(self) -> None:
        """Drop everything gathered (the block raised)."""
        self._done = True
        self._ops = []

    def _check_open(self) -> None:
        if self._done:
            raise InvalidArgument("this unit of work is finished: open a new transaction")
