"""The unit of work: nodes, events and artifacts of one session that commit together or not at all.

:class:`UnitOfWork` is what ``store.transaction(session_id)`` hands out. Its ``add_*`` methods
validate their input at once (bad input raises there, before anything is queued) and return the
new id; nothing touches the database until the block ends without an error, when the whole unit
goes to the writer as one job (:func:`apply_ops`, run in the writer's thread). Leaving the block
by an exception discards it. Artifact files are the exception to "nothing happens before the
end": each starts being written when it is added (:mod:`soong_store.write.file_pool`), and a
discarded unit removes them again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sqlalchemy import Connection

from soong_store.errors import InvalidArgument, StoreClosed
from soong_store.files.artifact_op import ArtifactOp, SpillPolicy, drop_files
from soong_store.files.folder import ArtifactFiles, PendingFile
from soong_store.model import codec
from soong_store.model.checks import check_optional_id, check_token_count, enum_value
from soong_store.model.content import artifact_refs, validate_content
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
from soong_store.write.ops import (
    NODE_CREATED,
    EventOp,
    NodeOp,
    Op,
    StepOp,
    artifacts_of,
    node_event,
    spill_large_json,
)
from soong_store.write.session_writer import SessionWriter

if TYPE_CHECKING:
    from soong_store.write.writer import Prerequisite

T = TypeVar("T")


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
        metadata_json, metadata_value = codec.encode_column(metadata, what="node metadata")
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
