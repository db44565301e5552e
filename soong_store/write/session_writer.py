"""The writer side of a session: sequence numbers, tree rules and lifecycle bookkeeping.

:class:`SessionWriter` runs inside the writer's transaction. It checks the session, assigns
``node_seq``, ``seq`` and ``run_seq`` (dense, from the current maxima, under the write lock, so they
stay dense whichever process writes), resolves default parents and agents, enforces the branch rule,
and moves the session's active node and the runs' start/end nodes. Units of work
(:func:`soong_store.write.unit_of_work.apply_ops`), lifecycle writes (runs, agents, switches), forks
and imports all go through it, so every node and event of a session gets its numbers in one place.

What a write decides (the default parent, the branch rule, whether a run takes nodes) is
decided by :mod:`soong_store.rules.tree`; the statements it runs are prepared once per session
(:mod:`soong_store.write.statements`), so the hot path only binds values.

Opening it (:func:`load`): a session's row for a write, its pair of tables placed first.

What :meth:`~soong_store.write.session_writer.SessionWriter.open` reads before it numbers
anything: the session's write lock, then its row with the current maxima of ``node_seq`` and
``seq``. A session whose pair the catalog does not know yet is looked up in ``session_files``
first: a session never written gets its pair here (:attr:`Loaded.created`: its
``session_created`` event is still to write), one in the main file is remembered, one idle in a
shard file is brought back into the main file, all in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import OperationalError

from soong_store.backends.base import backend_class_of, lock_session
from soong_store.backends.prepared import LARGE_VALUE, Prepared, Runner, bare_binds
from soong_store.catalog import lookup as catalog
from soong_store.catalog import moves
from soong_store.errors import NotFound, SessionArchived
from soong_store.files.artifact_op import ArtifactOp
from soong_store.model.enums import SessionStatus
from soong_store.model.first_event import created_event_row
from soong_store.model.ids import utc_now
from soong_store.rules import tree
from soong_store.schema.tables import session_files_table, sessions_table
from soong_store.search.index import index_rows, search_row
from soong_store.write.statements import ACTIVE_HAS_CHILD as _ACTIVE_HAS_CHILD
from soong_store.write.statements import MAX_NODE_SEQ as _MAX_NODE_SEQ
from soong_store.write.statements import MAX_SEQ as _MAX_SEQ
from soong_store.write.statements import RUN_FIELDS, SessionStatements
from soong_store.write.statements import session_statements as _statements

if TYPE_CHECKING:  # built by the unit of work, which runs this module's writer
    from soong_store.write.unit_of_work import EventOp, NodeOp

LOOKUPS = 4
"""Nodes read one by one above a tool result looking for its call: most often the parent made
it, or a node a few results up when a model called several tools at once. A lookup by key costs
less than the recursive climb, which reads the rest of the path (16 nodes, then 64 ...)."""


@dataclass(slots=True)
class _RunState:
    row: dict[str, Any]
    next_run_seq: int | None = None
    dirty: bool = False


@dataclass(slots=True)
class SessionWriter:
    """Writes to one session inside the writer's transaction, keeping its counters in step."""

    connection: Connection
    session: dict[str, Any]
    _sql: SessionStatements
    _db: Runner
    _next_node_seq: int = 1
    _next_seq: int = 1
    _has_child: dict[tuple[str, str], bool] = field(default_factory=dict)
    """Whether a node has a child of an agent, by (node, agent), as this transaction knows it
    (a node written here has no child but those written after it)."""
    _has_root: bool | None = None
    """Whether the root agent has a root node (known once asked or written)."""
    _runs: dict[str, _RunState] = field(default_factory=dict)
    _agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    _session_dirty: bool = False
    _written: dict[str, str] = field(default_factory=dict)
    """The agent of each node this transaction has written, by node id."""
    _calls: dict[str, tuple[str | None, tuple[str, ...]]] = field(default_factory=dict)
    """The parent and tool calls of each node :meth:`add_node` wrote, by node id."""
    _unindexed: list[dict[str, Any]] = field(default_factory=list)
    """The search rows of the nodes written since :meth:`index_written`."""
    now: str = field(default_factory=utc_now)
    """The time of this transaction: the ``created_at`` of the rows it adds live (recorded
    history keeps its own) and every ``updated_at`` it sets.

    Taken once, under the write lock: formatting the clock was ~5% of the writer's job of an
    append when each row took its own, and rows committed together carry one instant (their
    seqs order them)."""

    @classmethod
    def open(
        cls, connection: Connection, session_id: str, *, writable: bool = True
    ) -> SessionWriter:
        """Load the session (``NotFound``) and, when writing, refuse an archived one.

        Its pair is placed first (:mod:`soong_store.write.session_writer`); a session written for
        the first time gets its ``session_created`` event as ``seq`` 1 here, in this
        transaction (:mod:`soong_store.model.first_event`).
        """
        row, sql, db, created = load(connection, session_id, writable=writable)
        max_node_seq, max_seq = row.pop(_MAX_NODE_SEQ), row.pop(_MAX_SEQ)
        active_has_child = bool(row.pop(_ACTIVE_HAS_CHILD))
        writer = cls(connection, row, sql, db)
        writer._next_node_seq = (max_node_seq or 0) + 1
        writer._next_seq = (max_seq or 0) + 1
        if row["active_node_id"] is not None:
            key = (row["active_node_id"], row["root_agent_id"])
            writer._has_child[key] = active_has_child
        if created:
            writer.restore_event(created_event_row(row))
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

    def node_agent(self, node_id: str) -> str | None:
        """The agent of a node of this session (``None``: no such node)."""
        written = self._written.get(node_id)
        if written is not None:
            return written
        agent: str | None = self._db.scalar(self._sql.node_agent, {"p_node": node_id})
        return agent

    def require_node(self, node_id: str) -> str:
        """The node's agent; ``NotFound`` unless the node is in this session."""
        agent = self.node_agent(node_id)
        if agent is None:
            raise NotFound(f"no node {node_id!r} in session {self.session_id!r}", node_id=node_id)
        return agent

    def has_child(self, node_id: str, agent_id: str) -> bool:
        """Whether the node has a child of ``agent_id`` (as this transaction sees it)."""
        key = (node_id, agent_id)
        known = self._has_child.get(key)
        if known is None:
            if node_id in self._written:
                return False  # a child written since would have said so
            params = {"p_node": node_id, "p_agent": agent_id}
            known = self._db.scalar(self._sql.has_child, params) is not None
            self._has_child[key] = known
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
        recorded = tree.recorded_elsewhere(op.metadata)
        tree.check_branch(
            self.session_id,
            op.role,
            op.node_type,
            parent_id,
            agent_id,
            root_agent=root_agent,
            parent_has_child=self.has_child,
            root_agent_has_root=self._root_agent_has_root,
            recorded=recorded,
        )
        ids = tree.tool_ids(op.content)
        if not recorded:
            tree.check_tool_blocks(op.node_id, op.role, ids, lambda: self._calls_above(parent_id))
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
            "created_at": self.now,
        }
        self._put_node(row)
        self._calls[op.node_id] = (parent_id, ids.calls)
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

    def _calls_above(self, node_id: str | None) -> Iterator[tuple[str, ...]]:
        """The tool calls of each node from ``node_id`` up its path, nearest first.

        Nodes this transaction wrote are known; above them the path is climbed in the database
        in growing steps, as far as the caller reads.
        """
        while node_id is not None and (held := self._calls.get(node_id)) is not None:
            yield held[1]
            node_id = held[0]
        for _ in range(LOOKUPS):
            if node_id is None:
                return
            row = self._db.first(self._sql.node_calls, {"p_node": node_id})
            if row is None:  # a chain that breaks off
                return
            yield tree.stored_tool_ids(row["content_json"]).calls
            node_id = row["parent_id"]
        steps = 4 * LOOKUPS
        while node_id is not None:
            params = {"p_node": node_id, "p_steps": steps}
            rows = self._db.execute(self._sql.climb_calls, params).fetchall()
            for _, _, content_json in rows:
                yield tree.stored_tool_ids(content_json).calls
            if len(rows) < steps:  # a root, or a chain that breaks off
                return
            node_id, steps = rows[-1][1], steps * 4

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
            "created_at": self.now,
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
            "created_at": self.now,
        }
        self._db.execute(self._sql.insert_artifact, row)
        return row

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

    def index_written(self) -> None:
        """Index the nodes written so far, in one statement (every writer path calls it)."""
        if self._unindexed:
            index_rows(self._db, self.connection, self._unindexed)
            self._unindexed = []

    def finish(self) -> None:
        """Index the nodes written, write back the session's and runs' changed columns."""
        self.index_written()
        now = self.now
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
                values = {f"p_{name}": state.row[name] for name in RUN_FIELDS}
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
        stored = self._numbered_event(row)
        self._db.execute(self._sql.insert_event, stored)
        return stored

    def restore_events(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """:meth:`restore_event` of each of ``rows``, in one driver call (an import's pages)."""
        stored = [self._numbered_event(row) for row in rows]
        self._db.executemany(self._sql.insert_event, stored)
        return stored

    def _numbered_event(self, row: dict[str, Any]) -> dict[str, Any]:
        run_seq = None if row["run_id"] is None else self._next_run_seq(row["run_id"])
        return {**row, "seq": self._take_seq(), "run_seq": run_seq}

    def restore_artifact(self, row: dict[str, Any]) -> None:
        """Insert an artifact row of recorded history as it is (its file is in place)."""
        self._db.execute(self._sql.insert_artifact, row)

    def restore_nodes(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """:meth:`restore_node` of each of ``rows``, in one driver call (an import's pages)."""
        stored = [{**row, "node_seq": self._take_node_seq()} for row in rows]
        self._put_nodes(stored)
        return stored

    def _put_node(self, row: dict[str, Any]) -> None:
        self._put_nodes([row])

    def _put_nodes(self, rows: list[dict[str, Any]]) -> None:
        """The one insert of nodes (one driver call), and what the transaction keeps of them."""
        if len(rows) == 1:
            self._db.execute(self._sql.insert_node, rows[0])
        else:
            self._db.executemany(self._sql.insert_node, rows)
        if rows and len(rows[-1]["content_json"]) >= LARGE_VALUE:
            self._db.release(self._sql.insert_node)  # SQLite holds the last row's values
        for row in rows:
            self._note_node(row)

    def _note_node(self, row: dict[str, Any]) -> None:
        """What the transaction keeps of a node it wrote: its search row, parent and agent."""
        indexed = search_row(self.session_id, row)
        if indexed is not None:
            self._unindexed.append(indexed)
        parent_id = row["parent_id"]
        self._written[row["node_id"]] = row["agent_id"]
        if parent_id is not None:
            self._has_child[parent_id, row["agent_id"]] = True

    def _take_node_seq(self) -> int:
        seq = self._next_node_seq
        self._next_node_seq += 1
        return seq

    def _take_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq


class Loaded(NamedTuple):
    """The session's row (with its maxima), its statements, the runner, and a new pair."""

    row: dict[str, Any]
    sql: SessionStatements
    db: Runner
    created: bool


@lru_cache(maxsize=8)
def _pair_lookup(dialect: Dialect) -> Prepared:
    """:data:`~soong_store.catalog.lookup.PAIR_LOOKUP`, as text where binds are bare (SQLite)."""
    if not bare_binds(dialect):
        return Prepared.compile(catalog.PAIR_LOOKUP, dialect)
    preparer = dialect.identifier_preparer
    sessions = preparer.format_table(sessions_table)
    files = preparer.format_table(session_files_table)
    sid, file = preparer.quote("session_id"), preparer.quote("file")
    sql = (
        f"SELECT {sessions}.{sid}, {files}.{file} FROM {sessions}"
        f" LEFT OUTER JOIN {files} ON {files}.{sid} = {sessions}.{sid}"
        f" WHERE {sessions}.{sid} = :p_session"
    )
    return Prepared.written(sql, dialect, ("session_id", "file"))


def load(connection: Connection, session_id: str, *, writable: bool) -> Loaded:
    """Lock and read the session (``NotFound``); when writing, refuse an archived one."""
    if lock_session(connection, session_id) is False:  # the lock found no row
        raise NotFound(f"no session {session_id!r}", session_id=session_id)
    sql = _statements(session_id, connection.dialect)
    db = Runner(connection)
    engine = connection.engine
    row = None
    if catalog.knows_pair(connection, session_id):
        try:
            row = db.first(sql.session, {"p_session": session_id})
        except OperationalError as exc:
            # Dropped by another process since: ask the catalog (below) what it is now.
            if not backend_class_of(connection).is_missing_table(exc):
                raise
            catalog.forget_pair(engine, session_id)
    created = False
    if row is None:
        found = db.first(_pair_lookup(connection.dialect), {"p_session": session_id})
        if found is None:
            raise NotFound(f"no session {session_id!r}", session_id=session_id)
        if found["file"] is None:
            catalog.create_pair(connection, session_id)
            created = True
        elif found["file"] == catalog.MAIN:
            catalog.remember_pair(engine, session_id)
        else:  # idle in a shard: back to the main file first, in this transaction
            moves.bring_back(connection, session_id)
        row = db.first(sql.session, {"p_session": session_id})
        if row is None:
            raise NotFound(f"no session {session_id!r}", session_id=session_id)
    if writable and row["status"] == SessionStatus.ARCHIVED:
        raise SessionArchived(
            f"session {session_id!r} is archived and takes no writes", session_id=session_id
        )
    return Loaded(row, sql, db, created)
