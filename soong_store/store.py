"""``SessionStore``: the async API the agent runtime uses.

The store validates every argument before anything is queued, sends writes to its
:class:`~soong_store.writer.Writer` and runs reads on a small pool of reader threads, each read in
one snapshot; that plumbing, and opening and closing, are its
:class:`~soong_store.runtime.StoreRuntime`'s. What differs between databases is asked of the
store's backend (:mod:`soong_store.backends`), chosen by the URL's dialect when the store is
made.

The functions at the end of this module (:func:`run_read`, :func:`run_write`,
:func:`artifact_files`, :func:`backend_of`) are the store's **internal surface**: what the check,
export and import, the CLI and the importers of this package need beyond the public API. They are
not part of the public API (``soong_store.__all__``) and may change with it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Self, TypeVar

from sqlalchemy import Connection
from sqlalchemy.engine import URL

from soong_store import calls
from soong_store.backends import default_url
from soong_store.backends.base import Backend, Durability, open_backend
from soong_store.backends.retry import DEFAULT_DEADLINE_S, RetryPolicy
from soong_store.errors import InvalidArgument, StoreClosed
from soong_store.files.artifacts import (
    MAX_ARTIFACT_BYTES,
    SPILL_BYTES,
    SPILL_TOKENS,
    SpillPolicy,
)
from soong_store.files.store import ArtifactFiles
from soong_store.model.enums import (
    AgentStatus,
    AgentType,
    EndReason,
    EventLevel,
    NodeType,
    Role,
    RunStatus,
    SessionStatus,
)
from soong_store.model.ids import check_id, check_optional_id, check_session_id
from soong_store.model.records import (
    AgentRecord,
    ArtifactRecord,
    ContextView,
    EventRecord,
    NodeRecord,
    RunRecord,
    SessionRecord,
)
from soong_store.model.search import SearchHit
from soong_store.ops import check_bound
from soong_store.runtime import StoreRuntime
from soong_store.search import pending as search_pending
from soong_store.search import run as search_run
from soong_store.sql import reads, writes
from soong_store.sql.cache import PathCache
from soong_store.tasks.registry import TaskDags
from soong_store.tasks.wal import TaskDag
from soong_store.uow import UnitOfWork
from soong_store.writer import Prerequisite

T = TypeVar("T")


def default_home() -> Path:
    """``$SOONG_AGENT_HOME``, else ``~/.soong-agent``."""
    env = os.environ.get("SOONG_AGENT_HOME")
    return Path(env) if env else Path.home() / ".soong-agent"


class SessionStore:
    """The persistence layer of one agent home: sessions, agents, runs, nodes and events.

    Use it as an async context manager (or call :meth:`open` and :meth:`close`)::

        async with SessionStore() as store:
            session = await store.create_session(cwd=".")
            await store.append_node(session.session_id, "user", "message", [{"type": "text",
                                    "text": "hello"}])

    Event loops and threads: a store is not tied to the loop that opened it. Any coroutine may be
    awaited from any event loop, in any thread, also from several loops at once: writes go to
    the writer's thread and reads to the reader threads, and each result is handed back to the
    loop of its caller. Opening and closing from several loops at once open and close once.

    Processes: a store belongs to the process that opened it. After ``os.fork()`` every call
    in the child raises :class:`~soong_store.errors.StorageError` (the writer's thread and the
    connections stay in the parent); the child opens a store of its own. ``close()`` in the
    child only lets go of the inherited store, without touching the parent's connections.

    Contention: work that finds the database locked by another connection is tried again with
    backoff for up to ``lock_wait`` seconds (writes, reads, the open-time upgrade alike); only
    then does the caller get a :class:`~soong_store.errors.StorageError`.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        url: str | URL | None = None,
        durability: Durability = "normal",
        sqlite_module: str | ModuleType | None = None,
        *,
        spill_bytes: int = SPILL_BYTES,
        spill_tokens: int = SPILL_TOKENS,
        max_artifact_bytes: int = MAX_ARTIFACT_BYTES,
        lock_wait: float = DEFAULT_DEADLINE_S,
    ) -> None:
        if durability not in ("normal", "full"):
            raise InvalidArgument(f"invalid durability {durability!r}: expected 'normal' or 'full'")
        self.home = Path(home) if home is not None else default_home()
        self.url = url if url is not None else default_url(self.home)
        self.durability: Durability = durability
        self._backend = open_backend(
            self.url,
            durability=durability,
            module=sqlite_module,
            retry=RetryPolicy(deadline=calls.check_lock_wait(lock_wait)),
        )
        self._policy = SpillPolicy(
            max_bytes=check_bound(spill_bytes, "spill_bytes", low=1) or SPILL_BYTES,
            max_tokens=check_bound(spill_tokens, "spill_tokens", low=1) or SPILL_TOKENS,
            max_artifact_bytes=check_bound(max_artifact_bytes, "max_artifact_bytes", low=1)
            or MAX_ARTIFACT_BYTES,
        )
        self._files = ArtifactFiles(self.home / "artifacts")
        self._runtime = StoreRuntime(self.home, self._backend, self._files)
        self._tasks = TaskDags()
        self._paths = PathCache()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Create the home, bring the schema to head and start the writer."""
        await self._runtime.open()

    async def close(self) -> None:
        """Finish task appends and queued writes, then release the connections (twice is fine)."""
        if self._runtime.is_open and self._runtime.in_own_process:
            await self._tasks.close(self._runtime.generation)
        await self._runtime.close()

    def _write(
        self,
        job: Callable[[Connection], T],
        on_abort: Callable[[], None] | None = None,
        after: Sequence[Prerequisite] = (),
    ) -> Awaitable[T]:
        return self._runtime.write(job, on_abort=on_abort, after=after)

    def _read(self, query: Callable[[Connection], T]) -> Awaitable[T]:
        return self._runtime.read(query)

    # -- sessions ---------------------------------------------------------------------------

    async def create_session(
        self,
        cwd: str | os.PathLike[str],
        metadata: Any = None,
        root_agent_type: AgentType | str = "main",
    ) -> SessionRecord:
        """Create a session with its root agent (``main`` or ``orchestrator``) and tables.

        ``cwd`` is stored as an absolute path: the session's task logs live under it, and they
        must be found again from any working directory.
        """
        return await self._write(calls.create_session_job(cwd, metadata, root_agent_type))

    async def get_session(self, session_id: str) -> SessionRecord:
        """One session (``NotFound`` if there is none)."""
        sid = check_session_id(session_id)
        return await self._read(partial(reads.get_session, session_id=sid))

    async def list_sessions(
        self,
        status: SessionStatus | str | None = None,
        limit: int | None = None,
        *,
        after: SessionRecord | None = None,
    ) -> list[SessionRecord]:
        """Sessions, most recently updated first; ``after``: the next page after that record.

        Pass the last record of a page as ``after`` to read the next one (a key cursor: a page
        far down costs what the first one does).
        """
        return await self._read(calls.list_sessions_job(status, limit, after))

    async def archive_session(self, session_id: str) -> SessionRecord:
        """Make a session read-only (it can still be read, exported, forked and deleted)."""
        sid = check_session_id(session_id)
        return await self._write(partial(writes.archive_session, session_id=sid))

    async def delete_session(self, session_id: str) -> None:
        """Remove a session's rows, tables and artifact files (shared files stay while named)."""
        self._tasks.forget_session(await calls.delete_session(self._runtime, session_id))

    async def fork_session(self, session_id: str, node_id: str) -> SessionRecord:
        """A new session holding copies of the active path up to ``node_id``."""
        return await calls.fork_session(self._runtime, session_id, node_id)

    # -- agents and runs --------------------------------------------------------------------

    async def create_agent(
        self,
        session_id: str,
        agent_type: AgentType | str,
        parent_agent_id: str | None = None,
        created_by_run_id: str | None = None,
        fork_from_node_id: str | None = None,
        metadata: Any = None,
    ) -> AgentRecord:
        """Add a ``sub`` or ``fork`` agent to a session."""
        job = calls.create_agent_job(
            session_id, agent_type, parent_agent_id, created_by_run_id, fork_from_node_id, metadata
        )
        return await self._write(job)

    async def get_agent(self, agent_id: str) -> AgentRecord:
        """One agent."""
        aid = check_id(agent_id, "agent")
        return await self._read(partial(reads.get_agent, agent_id=aid))

    async def list_agents(self, session_id: str) -> list[AgentRecord]:
        """A session's agents in creation order."""
        sid = check_session_id(session_id)
        return await self._read(partial(reads.list_agents, session_id=sid))

    async def update_agent(
        self,
        agent_id: str,
        status: AgentStatus | str | None = None,
        result: Any = None,
        metadata: Any = None,
    ) -> AgentRecord:
        """Change an agent's status, result or metadata (terminal statuses are final)."""
        return await self._write(calls.update_agent_job(agent_id, status, result, metadata))

    async def start_run(
        self,
        session_id: str,
        agent_id: str,
        status: RunStatus | str = "running",
        metadata: Any = None,
    ) -> RunRecord:
        """Start a run of an agent; a session's main agent runs one at a time."""
        return await self._write(calls.start_run_job(session_id, agent_id, status, metadata))

    async def get_run(self, run_id: str) -> RunRecord:
        """One run."""
        rid = check_id(run_id, "run")
        return await self._read(partial(reads.get_run, run_id=rid))

    async def list_runs(self, session_id: str) -> list[RunRecord]:
        """A session's runs in creation order."""
        sid = check_session_id(session_id)
        return await self._read(partial(reads.list_runs, session_id=sid))

    async def update_run(
        self,
        run_id: str,
        status: RunStatus | str | None = None,
        turn_count: int | None = None,
        usage: Any = None,
        metadata: Any = None,
    ) -> RunRecord:
        """Move a run forward (queued, pending, running) or record its counters."""
        job = calls.update_run_job(run_id, status, turn_count, usage, metadata)
        return await self._write(job)

    async def finish_run(
        self,
        run_id: str,
        status: RunStatus | str,
        end_reason: EndReason | str,
        usage: Any = None,
        error: Any = None,
        turn_count: int | None = None,
    ) -> RunRecord:
        """End a run with a terminal status and an end reason."""
        job = calls.finish_run_job(run_id, status, end_reason, usage, error, turn_count)
        return await self._write(job)

    # -- nodes and events -------------------------------------------------------------------

    @asynccontextmanager
    async def transaction(self, session_id: str) -> AsyncIterator[UnitOfWork]:
        """A unit of work: the nodes and events added in the block commit together or not at all."""
        sid = check_session_id(session_id)
        self._runtime.check_process()
        if not self._runtime.is_open:
            raise StoreClosed("the store is not open")
        tx = UnitOfWork(
            sid,
            partial(calls.submit_ops, self._runtime, sid),
            self._policy,
            self._runtime.start_file,
            on_commit=lambda done: self._paths.written(sid, done.nodes),
        )
        try:
            yield tx
        except BaseException:
            tx.discard()
            raise
        await tx.commit()

    async def append_node(
        self,
        session_id: str,
        role: Role | str,
        node_type: NodeType | str,
        content: object,
        agent_id: str | None = None,
        run_id: str | None = None,
        parent_id: str | None = None,
        metadata: Any = None,
        token_count: int | None = None,
        event: str | Mapping[str, Any] | None = None,
    ) -> NodeRecord:
        """Append one node with its event (``node_created`` unless ``event`` says otherwise)."""
        async with self.transaction(session_id) as tx:
            tx.add_node(
                role,
                node_type,
                content,
                agent_id=agent_id,
                run_id=run_id,
                parent_id=parent_id,
                metadata=metadata,
                token_count=token_count,
                event=event,
            )
        return tx.nodes[0]

    async def append_event(
        self,
        session_id: str,
        event_type: str,
        level: EventLevel | str = "info",
        agent_id: str | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        tool_call_id: str | None = None,
        payload: Any = None,
    ) -> EventRecord:
        """Append one event to a session's timeline."""
        async with self.transaction(session_id) as tx:
            tx.add_event(
                event_type,
                level=level,
                agent_id=agent_id,
                run_id=run_id,
                node_id=node_id,
                tool_call_id=tool_call_id,
                payload=payload,
            )
        return tx.events[0]

    async def switch_node(self, session_id: str, node_id: str | None) -> SessionRecord:
        """Make ``node_id`` the session's active node; ``None`` clears it.

        With no active node the path and context are empty, and the root agent's next node
        without a ``parent_id`` starts a new root beside the old ones: a branch, so it must be a
        user message once the root agent has nodes (how a user edits the first message, or an
        SDK clears a session while keeping its history).
        """
        sid = check_session_id(session_id)
        nid = check_optional_id(node_id, "node")
        return await self._write(partial(writes.switch_node, session_id=sid, node_id=nid))

    async def get_node(self, session_id: str, node_id: str) -> NodeRecord:
        """One node of a session."""
        sid = check_session_id(session_id)
        nid = check_id(node_id, "node")
        return await self._read(partial(reads.get_node, session_id=sid, node_id=nid))

    async def list_nodes(self, session_id: str) -> list[NodeRecord]:
        """Every node of a session by ``node_seq`` (the whole tree)."""
        sid = check_session_id(session_id)
        return await self._read(partial(reads.list_nodes, session_id=sid))

    async def children(self, session_id: str, node_id: str) -> list[NodeRecord]:
        """The children of a node by ``node_seq``."""
        sid = check_session_id(session_id)
        nid = check_id(node_id, "node")
        return await self._read(partial(reads.children, session_id=sid, node_id=nid))

    async def active_path(
        self, session_id: str, node_id: str | None = None, limit: int | None = None
    ) -> list[NodeRecord]:
        """The nodes from the root to ``node_id`` (default: the active node), root first.

        ``limit``: at most the last that many, root-most first; only they are read. Repeated
        reads are served from the store's path cache while the database says nothing changed
        (the records are then shared between reads: treat their values as read-only).
        """
        sid = check_session_id(session_id)
        nid = check_optional_id(node_id, "node")
        count = check_bound(limit, "limit")
        query = partial(self._paths.active_path, session_id=sid, node_id=nid, limit=count)
        return await self._read(query)

    async def context(
        self, session_id: str, node_id: str | None = None, limit: int | None = None
    ) -> ContextView:
        """The active path cut at its last compaction node, with its token total.

        ``limit``: at most the last that many nodes of the cut path, root-most first, and
        ``token_count`` the total of those; only they are read.
        """
        sid = check_session_id(session_id)
        nid = check_optional_id(node_id, "node")
        count = check_bound(limit, "limit")
        query = partial(self._paths.context, session_id=sid, node_id=nid, limit=count)
        return await self._read(query)

    async def timeline(
        self,
        session_id: str,
        run_id: str | None = None,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[EventRecord]:
        """Events by ``seq`` (``run_seq`` for one run), after ``after_seq``, at most ``limit``."""
        return await self._read(calls.timeline_job(session_id, run_id, after_seq, limit))

    async def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        role: Role | str | None = None,
        node_type: NodeType | str | None = None,
        agent_type: AgentType | str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[SearchHit]:
        """Nodes of every session, branch and agent whose text matches ``query``, best first.

        ``query`` is plain words (a node must hold each) and "quoted phrases" (words side by
        side); nothing in it is an operator. Ties go to the newer node by ``created_at``, then
        to the one indexed later; ``offset`` pages on.
        The filters narrow to one session, role, node type or agent type.

        Raises:
            InvalidArgument: a bad argument (``query`` not a string, an unknown role ...).
            StorageError: this database cannot search (a SQLite library without FTS5).
        """
        job = calls.search_job(
            query,
            session_id=session_id,
            role=role,
            node_type=node_type,
            agent_type=agent_type,
            limit=limit,
            offset=offset,
        )
        try:
            return await self._read(job)
        except search_run.IndexBehind:  # rows noted for FTS5: the writer takes them in first
            await self._write(search_pending.catch_up)
        again: Callable[..., list[SearchHit]] = job
        return await self._read(partial(again, caught_up=True))

    # -- artifacts --------------------------------------------------------------------------

    async def put_artifact(
        self,
        session_id: str,
        data: bytes,
        filename: str | None = None,
        mime_type: str | None = None,
        summary: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        tool_call_id: str | None = None,
        metadata: Any = None,
    ) -> ArtifactRecord:
        """Store ``data`` as a file of the session (an attachment, a tool's output)."""
        async with self.transaction(session_id) as tx:
            tx.add_artifact(
                data,
                filename=filename,
                mime_type=mime_type,
                summary=summary,
                agent_id=agent_id,
                run_id=run_id,
                node_id=node_id,
                tool_call_id=tool_call_id,
                metadata=metadata,
            )
        return tx.artifacts[0]

    async def get_artifact(self, artifact_id: str) -> ArtifactRecord:
        """One artifact's row."""
        aid = check_id(artifact_id, "artifact")
        return await self._read(partial(reads.get_artifact, artifact_id=aid))

    async def list_artifacts(self, session_id: str) -> list[ArtifactRecord]:
        """A session's artifacts in creation order."""
        sid = check_session_id(session_id)
        return await self._read(partial(reads.list_artifacts, session_id=sid))

    async def read_artifact(self, artifact_id: str) -> bytes:
        """The bytes of an artifact (``StorageError`` if its file is missing or damaged)."""
        return await calls.read_artifact(self._runtime, await self.get_artifact(artifact_id))

    async def gc(self, dry_run: bool = False, min_age: float = 600.0) -> list[str]:
        """Remove artifact files no row names (left by a crash between file and commit).

        Entries younger than ``min_age`` seconds are left alone: they may belong to a unit of
        work that is about to commit. Links are removed as links, never followed. Returns the
        orphan paths (relative to ``<home>/artifacts``). The rows are checked and the files
        unlinked in one writer job, so a file a row names is never removed.
        """
        return await calls.collect_garbage(self._runtime, dry_run, min_age)

    # -- task DAGs --------------------------------------------------------------------------

    async def task_dag(self, session_id: str, task_name: str) -> TaskDag:
        """The DAG of a named task of the session, replayed from its write-ahead log.

        The log lives at ``<session.cwd>/.soong-agent/tasks/<session_id>/``; one ``TaskDag`` per
        file is kept and handed to every caller, from any event loop (threads that each run a
        loop may share one DAG). Each call first catches the DAG up with records another
        process appended; when the file was deleted, moved, replaced or cut short, the log is
        replayed into a new ``TaskDag`` (the old one refuses appends). Task changes are mirrored
        as ``task_*`` events in the session's timeline. ``close()`` waits for appends in flight;
        after it, every DAG this store handed out raises ``StoreClosed`` on append.

        Raises:
            TaskDagUnavailable: the log is damaged or is not a regular file (the conversation
                stays readable).
            StoreClosed: the store is closed or closing.
        """
        session = await self.get_session(session_id)
        listener = partial(self._mirror_task, session.session_id, task_name)
        return await calls.task_dag(self._runtime, self._tasks, session, task_name, listener)

    async def _mirror_task(
        self, session_id: str, task_name: str, operation: str, arguments: dict[str, Any]
    ) -> None:
        await self.append_event(
            session_id, f"task_{operation}", payload={"task_name": task_name, **arguments}
        )


# -- the internal surface -------------------------------------------------------------------
# For this package's check, transfer, CLI and importers: not public API (see the module
# docstring). Each is a thin door to the store's own plumbing, so that no caller reaches for a
# private attribute.


def run_read(store: SessionStore, query: Callable[[Connection], T]) -> Awaitable[T]:
    """Run ``query`` on a read connection of ``store``, in one snapshot (errors translated)."""
    return store._runtime.read(query)


def run_write(
    store: SessionStore,
    job: Callable[[Connection], T],
    on_abort: Callable[[], None] | None = None,
) -> Awaitable[T]:
    """Run ``job`` in ``store``'s writer, in its transaction; ``on_abort`` when it did not commit.

    A job must be re-runnable (the writer retries a batch that found the database locked).
    """
    return store._runtime.write(job, on_abort=on_abort)


def artifact_files(store: SessionStore) -> ArtifactFiles:
    """The artifact folder of ``store``'s home."""
    return store._files


def runtime_of(store: SessionStore) -> StoreRuntime:
    """The engines, writer and reader threads under ``store`` (for tests of the plumbing)."""
    return store._runtime


def backend_of(store: SessionStore) -> Backend:
    """The backend ``store`` runs on (its engines, checks and error translation)."""
    return store._backend
