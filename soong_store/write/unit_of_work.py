"""The unit of work: nodes, events and artifacts of one session that commit together or not at all.

:class:`UnitOfWork` is what ``store.transaction(session_id)`` hands out. Its ``add_*`` methods
validate their input at once (bad input raises there, before anything is queued) and return the
new id; nothing touches the database until the block ends without an error, when the whole unit
goes to the writer as one job (:func:`apply_ops`, run in the writer's thread). Leaving the block
by an exception discards it. Artifact files are the exception to "nothing happens before the
end": each starts being written when it is added (:mod:`soong_store.write.file_pool`), and a
discarded unit removes them again.

Every argument a caller gives is checked once, with :mod:`soong_store.model.checks`, as its
operation (:class:`NodeOp`, :class:`EventOp`, :class:`StepOp`, an artifact's
:class:`~soong_store.files.artifact_op.ArtifactOp`) is built, before the writer sees it: enums,
ids, content blocks, JSON values. A bad input raises an
:class:`~soong_store.errors.InvalidArgument` at the call, with nothing queued.

The spill (:func:`spill_large_json`): a :class:`~soong_store.model.content.JsonBlock` whose data
is over the byte or token threshold (:class:`~soong_store.files.artifact_op.SpillPolicy`)
becomes an artifact in the node's own unit of work; the stored block keeps a short summary of
the data's shape and the reference, so the context never carries the large JSON again.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sqlalchemy import Connection

from soong_store.errors import InvalidArgument, StoreClosed
from soong_store.files.artifact_op import ArtifactOp, SpillPolicy, drop_files
from soong_store.files.folder import ArtifactFiles, PendingFile, StartFile
from soong_store.model import codec
from soong_store.model.checks import (
    check_event_type,
    check_optional_id,
    check_token_count,
    enum_value,
)
from soong_store.model.content import (
    ContentBlock,
    JsonBlock,
    Place,
    artifact_refs,
    encode_content,
    validate_content,
)
from soong_store.model.enums import EventLevel, NodeType, Role
from soong_store.model.ids import new_id
from soong_store.model.records import (
    ArtifactRecord,
    EventRecord,
    NodeRecord,
    written_artifact_record,
    written_event_record,
    written_node_record,
)
from soong_store.write.session_writer import SessionWriter

if TYPE_CHECKING:
    from soong_store.write.writer import Prerequisite

T = TypeVar("T")


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
            payload_json=None
            if payload is None
            else codec.dumps_text(payload, what="event payload"),
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


class Runtime(Protocol):
    """What a unit of work runs on: the store's writer and its artifact files."""

    files: ArtifactFiles

    def write(
        self,
        job: Callable[[Connection], T],
        on_abort: Callable[[], None] | None = None,
        after: Sequence[Prerequisite] = (),
    ) -> Awaitable[T]:
        """Run ``job`` in the writer, in its transaction (``on_abort``: it did not commit)."""

    def start_file(self, path: str, data: bytes) -> PendingFile:
        """Begin writing an artifact file (it is done before the unit's job is queued)."""


@dataclass(slots=True)
class Committed:
    """What one unit of work wrote, as records with their final numbers."""

    nodes: list[NodeRecord] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    artifacts: list[ArtifactRecord] = field(default_factory=list)


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
    Artifact files are written from the moment they are added; the commit waits for them,
    and a unit that does not commit removes them. ``on_commit`` is told what a unit wrote once
    it has committed (the store's path cache takes the new nodes from it).
    """

    def __init__(
        self,
        session_id: str,
        runtime: Runtime,
        policy: SpillPolicy,
        on_commit: Callable[[Committed], None] | None = None,
    ) -> None:
        self.session_id = session_id
        self._runtime = runtime
        self._policy = policy
        self._start_file = runtime.start_file
        self._on_commit = on_commit
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
        """Queue a node; return its id at once.

        Every argument is checked here, before anything is queued. Large JSON blocks are moved
        to artifacts here too, so the node's stored content is final; their files start now.
        Everything else is checked first, so that only the content itself can fail once a file
        is on its way (and then the files are dropped).
        """
        self._check_open()
        node_id = new_id("node")
        role_value = enum_value(Role, role, "role")
        type_value = enum_value(NodeType, node_type, "node type")
        agent = check_optional_id(agent_id, "agent")
        run = check_optional_id(run_id, "run")
        parent = check_optional_id(parent_id, "node")
        metadata_json, metadata_value = (
            (None, None)  # most nodes carry none
            if metadata is None
            else codec.encode_column(metadata, what="node metadata")
        )
        tokens = check_token_count(token_count)
        own_event = None if event is None else node_event(event, node_id)
        created = EventOp.own(NODE_CREATED, node_id=node_id) if own_event is None else None
        content_json, stored, spilled = spill_large_json(
            self.session_id, validate_content(content), self._policy, self._start_file
        )
        for artifact in spilled:
            artifact.node_id = node_id
        self._ops.append(
            NodeOp(
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
        )
        return node_id

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

    def add_step(self, job: Callable[[Connection], object]) -> None:
        """Queue a writer job of the caller's: it runs in this unit's transaction, in order.

        For rows an integration keeps beside the nodes (its state), which must commit with
        them or not at all. The job must be re-runnable (the writer may run a batch again);
        what it raises aborts the unit and reaches the caller.
        """
        self._check_open()
        self._ops.append(StepOp(job))

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
        op.write = self._start_file(op.path, op.data)
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
            if self._on_commit is not None:
                self._on_commit(committed)

    async def _submit(self, ops: list[Op]) -> Committed:
        """The unit's operations as one writer job; its files are written first.

        Files first, row second: a crash in between leaves an orphan file for gc, never a row
        without its file. A unit that does not commit takes its files away again. Once
        submitted, the unit goes on even if the caller is cancelled, so nothing strands.
        """
        runtime = self._runtime
        job = partial(apply_ops, session_id=self.session_id, ops=ops)
        files = artifacts_of(ops)
        if not files:
            return await runtime.write(job)
        file_writes: list[Prerequisite] = []
        for f in files:
            assert f.write is not None, "a unit of work starts each file as it is added"
            file_writes.append(f.write)
        discard = partial(runtime.files.discard, [f.path for f in files])
        try:
            return await runtime.write(job, on_abort=discard, after=file_writes)
        except StoreClosed:  # the job never ran: its files go
            drop_files(files)
            raise

    def discard(self) -> None:
        """Drop everything gathered (the block raised), the files already started too."""
        self._done = True
        drop_files(artifacts_of(self._ops))
        self._ops = []

    def _check_open(self) -> None:
        if self._done:
            raise InvalidArgument("this unit of work is finished: open a new transaction")


def apply_ops(connection: Connection, session_id: str, ops: list[Op]) -> Committed:
    """The writer job of a unit of work: write every op in order, each node with its event.

    A node's spilled artifacts are inserted right after it; their rows take its agent and run.
    The records are built from the rows and the values the ops carry: no column is decoded.
    """
    writer = SessionWriter.open(connection, session_id)
    named = {op.node_id for op in ops if isinstance(op, EventOp) and op.node_id is not None}
    out = Committed()
    for op in ops:
        if isinstance(op, ArtifactOp):
            row = writer.add_artifact(op)
            out.artifacts.append(written_artifact_record(row, op.metadata))
            if op.event:
                created = EventOp.own(
                    "artifact_created",
                    agent_id=op.agent_id,
                    run_id=op.run_id,
                    node_id=op.node_id,
                    payload={"artifact_id": op.artifact_id, "size_bytes": len(op.data)},
                )
                out.events.append(_event_record(session_id, writer.add_event(created), created))
        elif isinstance(op, NodeOp):
            row = writer.add_node(op)
            for artifact in op.artifacts:
                stored = writer.add_artifact(artifact, node=row)
                out.artifacts.append(written_artifact_record(stored, artifact.metadata))
            out.nodes.append(written_node_record(session_id, row, op.content, op.metadata))
            event = op.event
            if event is None and op.node_id not in named:
                event = op.created
            if event is not None:
                event.agent_id, event.run_id = row["agent_id"], row["run_id"]
                out.events.append(_event_record(session_id, writer.add_event(event), event))
        elif isinstance(op, StepOp):
            op.job(connection)
        else:
            out.events.append(_event_record(session_id, writer.add_event(op), op))
    writer.finish()
    return out


def _event_record(session_id: str, row: dict[str, Any], op: EventOp) -> EventRecord:
    return written_event_record(session_id, row, op.payload)
