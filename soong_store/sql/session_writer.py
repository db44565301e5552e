"""The writer side of a session: sequence numbers, tree rules and lifecycle bookkeeping.

:class:`SessionWriter` runs inside the writer's transaction. It checks the session, assigns
``node_seq``, ``seq`` and ``run_seq`` (dense, from the current maxima, under the write lock, so
they stay dense whichever process writes), resolves default parents and agents, enforces the
branch rule, and moves the session's active node and the runs' start/end nodes. Units of work
(:func:`apply_ops`) and lifecycle writes (runs, agents, switches) both go through it, so every
event of a session gets its numbers in one place.

Statements are built and compiled once (per session for the session's tables, per dialect) and
run on the driver's cursor (:mod:`soong_store.sql.prepared`), so the hot path only binds values. The
session's row comes with what a node append needs next (both counters, whether the active node
has a child) in one statement: on this machine a statement run right after the file fsync of a
spilled artifact costs ~45 µs, so each one saved counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, bindparam, exists, func, select, update
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import OperationalError
from sqlalchemy.sql.elements import ClauseElement

from soong_store.errors import NotFound, SessionArchived
from soong_store.files.artifacts import ArtifactOp
from soong_store.model.enums import SessionStatus
from soong_store.model.ids import utc_now
from soong_store.model.records import (
    ArtifactRecord,
    EventRecord,
    NodeRecord,
    artifact_record,
    event_record,
    node_record,
)
from soong_store.ops import EventOp, NodeOp, Op
from soong_store.rules import tree
from soong_store.schema.catalog import CACHE_SIZE, SessionTables, session_tables
from soong_store.schema.models import agents_table, artifacts_table, runs_table, sessions_table
from soong_store.sql.prepared import Prepared, Runner

_SESSION_ROW = select(sessions_table.c.session_id).where(
    sessions_table.c.session_id == bindparam("p_session")
)
_AGENT = select(agents_table).where(agents_table.c.agent_id == bindparam("p_agent"))
_RUN = select(runs_table).where(runs_table.c.run_id == bindparam("p_run"))
_ARTIFACT_OWNER = select(artifacts_table.c.session_id).where(
    artifacts_table.c.artifact_id == bindparam("p_artifact")
)
_MOVE_SESSION = (
    update(sessions_table)
    .where(sessions_table.c.session_id == bindparam("p_session"))
    .values(active_node_id=bindparam("p_active"), updated_at=bindparam("p_now"))
)
_RUN_FIELDS = [c.name for c in runs_table.c if c.name not in ("run_id", "created_at")]
_UPDATE_RUN = (
    update(runs_table)
    .where(runs_table.c.run_id == bindparam("p_run"))
    .values({name: bindparam(f"p_{name}") for name in _RUN_FIELDS})
)


_MAX_NODE_SEQ = "max_node_seq"
_MAX_SEQ = "max_seq"
_ACTIVE_HAS_CHILD = "active_has_child"


@dataclass(frozen=True, slots=True)
class _Statements:
    """The prepared statements over one session's tables and the global ones."""

    session: Prepared
    agent: Prepared
    run: Prepared
    artifact_owner: Prepared
    move_session: Prepared
    update_run: Prepared
    insert_artifact: Prepared
    node_exists: Prepared
    has_child: Prepared
    root_of_agent: Prepared
    latest_of_agent: Prepared
    max_run_seq: Prepared
    insert_node: Prepared
    insert_event: Prepared


@lru_cache(maxsize=CACHE_SIZE)
def _statements(session_id: str, dialect: Dialect) -> _Statements:
    tables = session_tables(session_id)
    nodes, events = tables.nodes, tables.events

    def prepare(statement: ClauseElement) -> Prepared:
        return Prepared.compile(statement, dialect)

    active_has_child = exists().where(nodes.c.parent_id == sessions_table.c.active_node_id)
    session = select(
        sessions_table,
        select(func.max(nodes.c.node_seq)).scalar_subquery().label(_MAX_NODE_SEQ),
        select(func.max(events.c.seq)).scalar_subquery().label(_MAX_SEQ),
        active_has_child.label(_ACTIVE_HAS_CHILD),
    ).where(sessions_table.c.session_id == bindparam("p_session"))
    return _Statements(
        session=prepare(session),
        agent=prepare(_AGENT),
        run=prepare(_RUN),
        artifact_owner=prepare(_ARTIFACT_OWNER),
        move_session=prepare(_MOVE_SESSION),
        update_run=prepare(_UPDATE_RUN),
        insert_artifact=prepare(artifacts_table.insert()),
        node_exists=prepare(select(nodes.c.node_id).where(nodes.c.node_id == bindparam("p_node"))),
        has_child=prepare(
            select(nodes.c.node_id).where(nodes.c.parent_id == bindparam("p_node")).limit(1)
        ),
        root_of_agent=prepare(
            select(nodes.c.node_id)
            .where(nodes.c.parent_id.is_(None), nodes.c.agent_id == bindparam("p_agent"))
            .limit(1)
        ),
        latest_of_agent=prepare(
            select(nodes.c.node_id)
            .where(nodes.c.agent_id == bindparam("p_agent"))
            .order_by(nodes.c.node_seq.desc())
            .limit(1)
        ),
        max_run_seq=prepare(
            select(func.max(events.c.run_seq)).where(events.c.run_id == bindparam("p_run"))
        ),
        insert_node=prepare(nodes.insert()),
        insert_event=prepare(events.insert()),
    )


def _session_exists(db: Runner, dialect: Dialect, session_id: str) -> bool:
    """Whether the ``sessions`` row exists (asked only when the session's tables are missing)."""
    lookup = Prepared.compile(_SESSION_ROW, dialect)
    return db.scalar(lookup, {"p_session": session_id}) is not None


@dataclass(slots=True)
class Committed:
    """What one unit of work wrote, as records with their final numbers."""

    nodes: list[NodeRecord] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    artifacts: list[ArtifactRecord] = field(default_factory=list)


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
    _sql: _Statements
    _db: Runner
    _next_node_seq: int = 1
    _next_seq: int = 1
    _has_child: dict[str, bool] = field(default_factory=dict)
    """Whether a node has a child, for the nodes this transaction has seen or written."""
    _has_root: bool | None = None
    """Whether the root agent has a root node (known once asked or written)."""
    _runs: dict[str, _RunState] = field(default_factory=dict)
    _agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    _session_dirty: bool = False
    _written: set[str] = field(default_factory=set)

    @classmethod
    def open(
        cls, connection: Connection, session_id: str, *, writable: bool = True
    ) -> SessionWriter:
        """Load the session (``NotFound``) and, when writing, refuse an archived one."""
        sql = _statements(session_id, connection.dialect)
        db = Runner(connection)
        try:
            row = db.first(sql.session, {"p_session": session_id})
        except OperationalError as exc:
            # The statement reads the session's own tables, so an unknown session fails here;
            # only then is the row looked up alone (a known one without its tables is damage).
            if "no such table" not in str(exc.orig) or _session_exists(
                db, connection.dialect, session_id
            ):
                raise
            row = None
        if row is None:
            raise NotFound(f"no session {session_id!r}", session_id=session_id)
        if writable and row["status"] == SessionStatus.ARCHIVED:
            raise SessionArchived(
                f"session {session_id!r} is archived and takes no writes", session_id=session_id
            )
        max_node_seq, max_seq = row.pop(_MAX_NODE_SEQ), row.pop(_MAX_SEQ)
        active_has_child = bool(row.pop(_ACTIVE_HAS_CHILD))
        writer = cls(connection, session_tables(session_id), row, sql, db)
        writer._next_node_seq = (max_node_seq or 0) + 1
        writer._next_seq = (max_seq or 0) + 1
        if row["active_node_id"] is not None:
            writer._has_child[row["active_node_id"]] = active_has_child
        return writer

    @property
    def session_id(self) -> str:
        """The id of the session being written."""
        return str(self.session["session_id"])

    def agent(self, agent_id: str) -> dict[str, Any]:
        """The agent's row; ``NotFound`` unless it belongs to this session."""
        if agent_id not in self._agents:
            row = self._db.first(self._sql.agent, {"p_agent": agent_id})
            if row is None or row["session_id"] != self.session_id:
                raise NotFound(
                    f"no agent {agent_id!r} in session {self.session_id!r}", agent_id=agent_id
                )
            self._agents[agent_id] = row
        return self._agents[agent_id]

    def run(self, run_id: str) -> dict[str, Any]:
        """The run's row as this transaction sees it; ``NotFound`` unless it is this session's."""
        return self._run_state(run_id).row

    def _run_state(self, run_id: str) -> _RunState:
        if run_id not in self._runs:
            row = self._db.first(self._sql.run, {"p_run": run_id})
            if row is None or row["session_id"] != self.session_id:
                raise NotFound(f"no run {run_id!r} in session {self.session_id!r}", run_id=run_id)
            self._runs[run_id] = _RunState(row)
        return self._runs[run_id]

    def node_exists(self, node_id: str) -> bool:
        """Whether the node is in this session."""
        if node_id in self._written:
            return True
        return self._db.scalar(self._sql.node_exists, {"p_node": node_id}) is not None

    def require_node(self, node_id: str) -> None:
        """Raise ``NotFound`` unless the node is in this session."""
        if not self.node_exists(node_id):
            raise NotFound(f"no node {node_id!r} in session {self.session_id!r}", node_id=node_id)

    def has_child(self, node_id: str) -> bool:
        """Whether the node has a child (as this transaction sees it)."""
        known = self._has_child.get(node_id)
        if known is None:
            known = self._db.scalar(self._sql.has_child, {"p_node": node_id}) is not None
            self._has_child[node_id] = known
        return known

    def _root_agent_has_root(self) -> bool:
        """Whether the root agent already has a root node (then another root is a branch)."""
        if self._has_root is None:
            if self._next_node_seq == 1:
                self._has_root = False  # no node yet
            else:
                params = {"p_agent": self.session["root_agent_id"]}
                self._has_root = self._db.scalar(self._sql.root_of_agent, params) is not None
        return self._has_root

    def _latest_node_of(self, agent_id: str) -> str | None:
        latest: str | None = self._db.scalar(self._sql.latest_of_agent, {"p_agent": agent_id})
        return latest

    def _is_root(self, agent_id: str) -> bool:
        # The session row names its root agent under a foreign key: it exists, no lookup needed.
        return bool(agent_id == self.session["root_agent_id"])

    def add_node(self, op: NodeOp) -> dict[str, Any]:
        """Insert a node after resolving its agent, parent and branch; return its row."""
        run = None
        if op.run_id is not None:
            run = self._run_state(op.run_id).row
            tree.check_run_takes_nodes(op.run_id, run["status"])
        agent_id = tree.node_agent(
            op.agent_id,
            root_agent_id=self.session["root_agent_id"],
            run_id=op.run_id,
            run_agent_id=None if run is None else run["agent_id"],
        )
        root_agent = self._is_root(agent_id)
        agent = None if root_agent else self.agent(agent_id)
        spilled = {artifact.artifact_id for artifact in op.artifacts}
        for artifact_id in op.artifact_refs:
            if artifact_id not in spilled:
                self.require_artifact(artifact_id)
        parent_id = op.parent_id
        if parent_id is not None:
            self.require_node(parent_id)
        else:
            parent_id = tree.default_parent(
                root_agent=root_agent,
                active_node_id=self.session["active_node_id"],
                run_end_node_id=None if run is None else run["end_node_id"],
                agent_type=None if agent is None else agent["agent_type"],
                fork_from_node_id=None if agent is None else agent["fork_from_node_id"],
                latest_node=lambda: self._latest_node_of(agent_id),
            )
        tree.check_branch(
            self.session_id,
            op.role,
            op.node_type,
            parent_id,
            root_agent=root_agent,
            parent_has_child=self.has_child,
            root_agent_has_root=self._root_agent_has_root,
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
        self._put_node(row)
        if root_agent:
            self.session["active_node_id"] = op.node_id
            if parent_id is None:
                self._has_root = True
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
            agent_id = agent_id or self._run_state(op.run_id).row["agent_id"]
            run_seq = self._next_run_seq(op.run_id)
        if agent_id is not None and not self._is_root(agent_id):
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
        self._db.execute(self._sql.insert_event, row)
        return row

    def _next_run_seq(self, run_id: str) -> int:
        state = self._run_state(run_id)
        if state.next_run_seq is None:
            current = self._db.scalar(self._sql.max_run_seq, {"p_run": run_id})
            state.next_run_seq = (current or 0) + 1
        seq = state.next_run_seq
        state.next_run_seq += 1
        return seq

    def require_artifact(self, artifact_id: str) -> None:
        """Raise ``NotFound`` unless the artifact exists in this session."""
        owner = self._db.scalar(self._sql.artifact_owner, {"p_artifact": artifact_id})
        if owner != self.session_id:
            raise NotFound(
                f"no artifact {artifact_id!r} in session {self.session_id!r}",
                artifact_id=artifact_id,
            )

    def add_artifact(self, op: ArtifactOp, node: dict[str, Any] | None = None) -> dict[str, Any]:
        """Insert an artifact row (its file is already written); links must be this session's."""
        if node is not None:  # the node's agent and run passed add_node's checks
            op.agent_id, op.run_id = node["agent_id"], node["run_id"]
        else:
            if op.agent_id is not None and not self._is_root(op.agent_id):
                self.agent(op.agent_id)
            if op.run_id is not None:
                self.run(op.run_id)
            if op.node_id is not None:
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
        self._db.execute(self._sql.insert_artifact, row)
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
            self._db.execute(
                self._sql.move_session,
                {
                    "p_session": self.session_id,
                    "p_active": self.session["active_node_id"],
                    "p_now": now,
                },
            )
            self.session["updated_at"] = now
        for run_id, state in self._runs.items():
            if state.dirty:
                state.row["updated_at"] = now
                values = {f"p_{name}": state.row[name] for name in _RUN_FIELDS}
                self._db.execute(self._sql.update_run, {**values, "p_run": run_id})
                state.dirty = False

    # -- recorded history: import and fork ------------------------------------------------

    def restore_node(self, row: dict[str, Any]) -> dict[str, Any]:
        """Insert a node of recorded history as it is (ids, parent, agent, time), numbered here.

        Import and fork write through this: their rows passed the one rule set (or are the
        store's own), so the rules of a live append (default parent, branch rule) do not apply,
        but the node takes the session's next ``node_seq`` as every node does.
        """
        stored = {**row, "node_seq": self._take_node_seq()}
        self._put_node(stored)
        return stored

    def restore_event(self, row: dict[str, Any]) -> dict[str, Any]:
        """Insert an event of recorded history with the session's next ``seq`` (and run_seq)."""
        run_seq = None if row["run_id"] is None else self._next_run_seq(row["run_id"])
        stored = {**row, "seq": self._take_seq(), "run_seq": run_seq}
        self._db.execute(self._sql.insert_event, stored)
        return stored

    def restore_artifact(self, row: dict[str, Any]) -> None:
        """Insert an artifact row of recorded history as it is (its file is in place)."""
        self._db.execute(self._sql.insert_artifact, row)

    def _put_node(self, row: dict[str, Any]) -> None:
        self._db.execute(self._sql.insert_node, row)
        node_id, parent_id = row["node_id"], row["parent_id"]
        self._written.add(node_id)
        self._has_child[node_id] = False
        if parent_id is not None:
            self._has_child[parent_id] = True

    def _take_node_seq(self) -> int:
        seq = self._next_node_seq
        self._next_node_seq += 1
        return seq

    def _take_seq(self) -> int:
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
            out.nodes.append(node_record(session_id, row, op.content))
            event = op.event
            if event is None and op.node_id not in named:
                event = op.created
            if event is not None:
                event.agent_id, event.run_id = row["agent_id"], row["run_id"]
                out.events.append(event_record(session_id, writer.add_event(event)))
        else:
            out.events.append(event_record(session_id, writer.add_event(op)))
    writer.finish()
    return out
