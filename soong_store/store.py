"""``SessionStore``: the async API the agent runtime uses.

The store validates every argument before anything is queued, sends writes to its
:class:`~soong_store.writer.Writer` and runs reads on a small pool of reader threads, each read in
one snapshot. Opening a store creates the home folder, upgrades the database to the newest schema
(once, even with several processes starting together) and starts the writer; closing it drains the
writer and releases every connection.
"""

from __future__ import annotations

import asyncio
import os
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Self, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError

from soong_store import _json, _reads, _writes
from soong_store._dberrors import translate
from soong_store._engine import (
    READ_POOL_SIZE,
    Durability,
    database_url,
    is_busy,
    load_sqlite_module,
    make_engine,
)
from soong_store._file_pool import FilePool, FileWrite
from soong_store._ops import Op, artifacts_of, check_token_count
from soong_store._ops import enum_value as _enum
from soong_store._session_writer import Committed, apply_ops
from soong_store._task_io import AnyLoopLock
from soong_store.artifacts import (
    MAX_ARTIFACT_BYTES,
    SPILL_BYTES,
    SPILL_TOKENS,
    ArtifactFiles,
    SpillPolicy,
    drop_files,
)
from soong_store.enums import (
    AgentStatus,
    AgentType,
    EndReason,
    EventLevel,
    NodeType,
    Role,
    RunStatus,
    SessionStatus,
)
from soong_store.errors import InvalidArgument, StorageError, StoreClosed
from soong_store.ids import check_id, check_optional_id, check_session_id
from soong_store.migrate import ensure_schema
from soong_store.records import (
    AgentRecord,
    ArtifactRecord,
    ContextView,
    EventRecord,
    NodeRecord,
    RunRecord,
    SessionRecord,
)
from soong_store.task_wal import TaskDag, task_root, task_wal_path
from soong_store.uow import UnitOfWork
from soong_store.writer import Prerequisite, Writer

T = TypeVar("T")
_READ_RETRY_S = 30.0


def default_home() -> Path:
    """``$SOONG_AGENT_HOME``, else ``~/.soong-agent``."""
    env = os.environ.get("SOONG_AGENT_HOME")
    return Path(env) if env else Path.home() / ".soong-agent"


def _positive(value: object, what: str, *, allow_zero: bool = False) -> int | None:
    if value is None:
        return None
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidArgument(f"invalid {what} {value!r}: expected an integer >= {low}")
    return value


class SessionStore:
    """The persistence layer of one agent home: sessions, agents, runs, nodes and events.

    Use it as an async context manager (or call :meth:`open` and :meth:`close`)::

        async with SessionStore() as store:
            session = await store.create_session(cwd=".")
            await store.append_node(session.session_id, "user", "message", [{"type": "text",
                                    "text": "hello"}])
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
    ) -> None:
        if durability not in ("normal", "full"):
            raise InvalidArgument(f"invalid durability {durability!r}: expected 'normal' or 'full'")
        self.home = Path(home) if home is not None else default_home()
        self.url = url if url is not None else database_url(self.home)
        self.durability: Durability = durability
        self._sqlite_module = load_sqlite_module(sqlite_module)
        self._policy = SpillPolicy(
            max_bytes=_positive(spill_bytes, "spill_bytes") or SPILL_BYTES,
            max_tokens=_positive(spill_tokens, "spill_tokens") or SPILL_TOKENS,
            max_artifact_bytes=_positive(max_artifact_bytes, "max_artifact_bytes")
            or MAX_ARTIFACT_BYTES,
        )
        self._files = ArtifactFiles(self.home / "artifacts")
        self._task_dags: dict[tuple[str, str], TaskDag] = {}
        self._task_handles: weakref.WeakSet[TaskDag] = weakref.WeakSet()
        self._task_lock = AnyLoopLock()
        self._tasks_closed_for: Writer | None = None
        self._writer: Writer | None = None
        self._file_pool: FilePool | None = None
        self._read_engine: Engine | None = None
        self._write_engine: Engine | None = None
        self._readers: ThreadPoolExecutor | None = None

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
        if self._writer is not None:
            return
        await asyncio.to_thread(self._open_sync)

    def _open_sync(self) -> None:
        # The engine refuses an unusable driver (too old a SQLite) before anything is created.
        admin = make_engine(self.url, "admin", sqlite_module=self._sqlite_module)
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            ensure_schema(admin)
        finally:
            admin.dispose()
        options: dict[str, Any] = {
            "durability": self.durability,
            "sqlite_module": self._sqlite_module,
        }
        self._write_engine = make_engine(self.url, "write", **options)
        with self._write_engine.connect():
            pass  # the first write connection switches the file to WAL before any reader opens
        self._read_engine = make_engine(self.url, "read", **options)
        self._readers = ThreadPoolExecutor(READ_POOL_SIZE, thread_name_prefix="soong-store-read")
        self._file_pool = FilePool(self._files)
        self._writer = Writer(self._write_engine)
        self._writer.start()

    async def close(self) -> None:
        """Finish queued writes, then release the connections. Closing twice is harmless."""
        await self._close_task_dags()
        writer, self._writer = self._writer, None
        if writer is None:
            return
        await writer.close()
        if self._file_pool is not None:  # after the writer: its waiting jobs need their files
            await asyncio.to_thread(self._file_pool.close)
        if self._readers is not None:
            self._readers.shutdown(wait=True)
        for engine in (self._write_engine, self._read_engine):
            if engine is not None:
                engine.dispose()

    # -- plumbing ---------------------------------------------------------------------------

    async def _write(
        self,
        job: Callable[[Connection], T],
        on_abort: Callable[[], None] | None = None,
        after: Sequence[Prerequisite] = (),
    ) -> T:
        if self._writer is None:
            raise StoreClosed("the store is not open")
        return await self._writer.submit(job, on_abort=on_abort, after=after)

    async def _read(self, query: Callable[[Connection], T]) -> T:
        if self._readers is None or self._read_engine is None or self._writer is None:
            raise StoreClosed("the store is not open")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._read_sync, query)

    def _read_sync(self, query: Callable[[Connection], T]) -> T:
        assert self._read_engine is not None
        deadline = time.monotonic() + _READ_RETRY_S
        while True:
            try:
                with self._read_engine.connect() as connection, connection.begin():
                    return query(connection)
            except OperationalError as exc:
                if not is_busy(exc) or time.monotonic() > deadline:
                    raise translate(exc) from exc
                time.sleep(0.01)
            except Exception as exc:
                raise translate(exc) from exc

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
        if not isinstance(cwd, str | os.PathLike):
            raise InvalidArgument(f"invalid cwd {cwd!r}: expected a path")
        cwd_text = os.path.abspath(_json.check_text(os.fspath(cwd), "cwd"))
        if "\x00" in cwd_text:
            raise InvalidArgument(f"invalid cwd {cwd!r}: a path cannot hold a NUL character")
        agent_type = _enum(AgentType, root_agent_type, "root agent type")
        if agent_type not in (AgentType.MAIN, AgentType.ORCHESTRATOR):
            raise InvalidArgument(
                f"invalid root agent type {agent_type!r}: expected 'main' or 'orchestrator'"
            )
        metadata_json = _json.dumps_optional(metadata, what="session metadata")
        return await self._write(
            partial(
                _writes.create_session,
                cwd=cwd_text,
                metadata_json=metadata_json,
                root_agent_type=agent_type,
            )
        )

    async def get_session(self, session_id: str) -> SessionRecord:
        """One session (``NotFound`` if there is none)."""
        sid = check_session_id(session_id)
        return await self._read(partial(_reads.get_session, session_id=sid))

    async def list_sessions(
        self, status: SessionStatus | str | None = None, limit: int | None = None
    ) -> list[SessionRecord]:
        """Sessions, most recently updated first."""
        wanted = None if status is None else _enum(SessionStatus, status, "session status")
        count = _positive(limit, "limit")
        return await self._read(partial(_reads.list_sessions, status=wanted, limit=count))

    async def archive_session(self, session_id: str) -> SessionRecord:
        """Make a session read-only (it can still be read, exported, forked and deleted)."""
        sid = check_session_id(session_id)
        return await self._write(partial(_writes.archive_session, session_id=sid))

    async def delete_session(self, session_id: str) -> None:
        """Remove a session's rows, tables and artifact files (shared files stay while named)."""
        sid = check_session_id(session_id)
        unreferenced = await self._write(partial(_writes.delete_session, session_id=sid))
        await asyncio.to_thread(self._files.discard, unreferenced)
        for key in [key for key in self._task_dags if key[0] == sid]:
            self._task_dags.pop(key).close()

    async def fork_session(self, session_id: str, node_id: str) -> SessionRecord:
        """A new session holding copies of the active path up to ``node_id``."""
        sid = check_session_id(session_id)
        nid = check_id(node_id, "node")
        return await self._write(partial(_writes.fork_session, session_id=sid, node_id=nid))

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
        job = partial(
            _writes.create_agent,
            session_id=check_session_id(session_id),
            agent_type=_enum(AgentType, agent_type, "agent type"),
            parent_agent_id=check_optional_id(parent_agent_id, "agent"),
            created_by_run_id=check_optional_id(created_by_run_id, "run"),
            fork_from_node_id=check_optional_id(fork_from_node_id, "node"),
            metadata_json=_json.dumps_optional(metadata, what="agent metadata"),
        )
        return await self._write(job)

    async def get_agent(self, agent_id: str) -> AgentRecord:
        """One agent."""
        aid = check_id(agent_id, "agent")
        return await self._read(partial(_reads.get_agent, agent_id=aid))

    async def list_agents(self, session_id: str) -> list[AgentRecord]:
        """A session's agents in creation order."""
        sid = check_session_id(session_id)
        return await self._read(partial(_reads.list_agents, session_id=sid))

    async def update_agent(
        self,
        agent_id: str,
        status: AgentStatus | str | None = None,
        result: Any = None,
        metadata: Any = None,
    ) -> AgentRecord:
        """Change an agent's status, result or metadata (terminal statuses are final)."""
        job = partial(
            _writes.update_agent,
            agent_id=check_id(agent_id, "agent"),
            status=None if status is None else _enum(AgentStatus, status, "agent status"),
            result_json=_json.dumps_optional(result, what="agent result"),
            metadata_json=_json.dumps_optional(metadata, what="agent metadata"),
        )
        return await self._write(job)

    async def start_run(
        self,
        session_id: str,
        agent_id: str,
        status: RunStatus | str = "running",
        metadata: Any = None,
    ) -> RunRecord:
        """Start a run of an agent; a session's main agent runs one at a time."""
        job = partial(
            _writes.start_run,
            session_id=check_session_id(session_id),
            agent_id=check_id(agent_id, "agent"),
            status=_enum(RunStatus, status, "run status"),
            metadata_json=_json.dumps_optional(metadata, what="run metadata"),
        )
        return await self._write(job)

    async def get_run(self, run_id: str) -> RunRecord:
        """One run."""
        rid = check_id(run_id, "run")
        return await self._read(partial(_reads.get_run, run_id=rid))

    async def list_runs(self, session_id: str) -> list[RunRecord]:
        """A session's runs in creation order."""
        sid = check_session_id(session_id)
        return await self._read(partial(_reads.list_runs, session_id=sid))

    async def update_run(
        self,
        run_id: str,
        status: RunStatus | str | None = None,
        turn_count: int | None = None,
        usage: Any = None,
        metadata: Any = None,
    ) -> RunRecord:
        """Move a run forward (queued, pending, running) or record its counters."""
        job = partial(
            _writes.update_run,
            run_id=check_id(run_id, "run"),
            status=None if status is None else _enum(RunStatus, status, "run status"),
            turn_count=check_token_count(turn_count),
            usage_json=_json.dumps_optional(usage, what="run usage"),
            metadata_json=_json.dumps_optional(metadata, what="run metadata"),
        )
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
        job = partial(
            _writes.finish_run,
            run_id=check_id(run_id, "run"),
            status=_enum(RunStatus, status, "run status"),
            end_reason=_enum(EndReason, end_reason, "end reason"),
            usage_json=_json.dumps_optional(usage, what="run usage"),
            error_json=_json.dumps_optional(error, what="run error"),
            turn_count=check_token_count(turn_count),
        )
        return await self._write(job)

    # -- nodes and events -------------------------------------------------------------------

    @asynccontextmanager
    async def transaction(self, session_id: str) -> AsyncIterator[UnitOfWork]:
        """A unit of work: the nodes and events added in the block commit together or not at all."""
        sid = check_session_id(session_id)
        if self._writer is None:
            raise StoreClosed("the store is not open")
        tx = UnitOfWork(sid, partial(self._submit_ops, sid), self._policy, self._start_file)
        try:
            yield tx
        except BaseException:
            tx.discard()
            raise
        await tx.commit()

    async def _submit_ops(self, session_id: str, ops: list[Op]) -> Committed:
        job = partial(apply_ops, session_id=session_id, ops=ops)
        files = artifacts_of(ops)
        if not files:
            return await self._write(job)
        # Files first, row second: a crash in between leaves an orphan file for gc, never a row
        # without its file. A unit that does not commit takes its files away again. Once
        # submitted, the unit goes on even if the caller is cancelled, so nothing strands.
        writes: list[FileWrite] = []
        for f in files:
            assert f.write is not None, "a unit of work starts each file as it is added"
            writes.append(f.write)
        try:
            return await self._write(
                job, on_abort=partial(self._files.discard, [f.path for f in files]), after=writes
            )
        except StoreClosed:  # the job never ran: its files go
            drop_files(files)
            raise

    def _start_file(self, path: str, data: bytes) -> FileWrite:
        if self._file_pool is None:
            raise StoreClosed("the store is not open")
        return self._file_pool.start(path, data)

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

    async def switch_node(self, session_id: str, node_id: str) -> SessionRecord:
        """Make ``node_id`` the session's active node."""
        sid = check_session_id(session_id)
        nid = check_id(node_id, "node")
        return await self._write(partial(_writes.switch_node, session_id=sid, node_id=nid))

    async def get_node(self, session_id: str, node_id: str) -> NodeRecord:
        """One node of a session."""
        sid = check_session_id(session_id)
        nid = check_id(node_id, "node")
        return await self._read(partial(_reads.get_node, session_id=sid, node_id=nid))

    async def list_nodes(self, session_id: str) -> list[NodeRecord]:
        """Every node of a session by ``node_seq`` (the whole tree)."""
        sid = check_session_id(session_id)
        return await self._read(partial(_reads.list_nodes, session_id=sid))

    async def children(self, session_id: str, node_id: str) -> list[NodeRecord]:
        """The children of a node by ``node_seq``."""
        sid = check_session_id(session_id)
        nid = check_id(node_id, "node")
        return await self._read(partial(_reads.children, session_id=sid, node_id=nid))

    async def active_path(self, session_id: str, node_id: str | None = None) -> list[NodeRecord]:
        """The nodes from the root to ``node_id`` (default: the active node), root first."""
        sid = check_session_id(session_id)
        nid = check_optional_id(node_id, "node")
        return await self._read(partial(_reads.active_path, session_id=sid, node_id=nid))

    async def context(self, session_id: str, node_id: str | None = None) -> ContextView:
        """The active path cut at its last compaction node, with its token total."""
        sid = check_session_id(session_id)
        nid = check_optional_id(node_id, "node")
        return await self._read(partial(_reads.context, session_id=sid, node_id=nid))

    async def timeline(
        self,
        session_id: str,
        run_id: str | None = None,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[EventRecord]:
        """Events by ``seq`` (``run_seq`` for one run), after ``after_seq``, at most ``limit``."""
        query = partial(
            _reads.timeline,
            session_id=check_session_id(session_id),
            run_id=check_optional_id(run_id, "run"),
            after_seq=_positive(after_seq, "after_seq", allow_zero=True),
            limit=_positive(limit, "limit"),
        )
        return await self._read(query)

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
        return await self._read(partial(_reads.get_artifact, artifact_id=aid))

    async def list_artifacts(self, session_id: str) -> list[ArtifactRecord]:
        """A session's artifacts in creation order."""
        sid = check_session_id(session_id)
        return await self._read(partial(_reads.list_artifacts, session_id=sid))

    async def read_artifact(self, artifact_id: str) -> bytes:
        """The bytes of an artifact (``StorageError`` if its file is missing or damaged)."""
        record = await self.get_artifact(artifact_id)
        data = await asyncio.to_thread(self._files.read, record.path)
        if record.size_bytes is not None and len(data) != record.size_bytes:
            raise StorageError(
                f"artifact {artifact_id!r} has {len(data)} bytes on disk, "
                f"{record.size_bytes} recorded",
                artifact_id=artifact_id,
            )
        return data

    async def gc(self, dry_run: bool = False, min_age: float = 600.0) -> list[str]:
        """Remove artifact files no row names (left by a crash between file and commit).

        Files younger than ``min_age`` seconds are left alone: they may belong to a unit of work
        that is about to commit. Returns the orphan paths (relative to ``<home>/artifacts``).
        """
        if isinstance(min_age, bool) or not isinstance(min_age, int | float) or min_age < 0:
            raise InvalidArgument(f"invalid min_age {min_age!r}: expected seconds >= 0")
        referenced = await self._read(_reads.artifact_paths)
        orphans = await asyncio.to_thread(self._files.orphans, referenced, float(min_age))
        if not dry_run:
            await asyncio.to_thread(self._files.discard, orphans)
        return orphans

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
        sid = check_session_id(session_id)
        session = await self.get_session(sid)
        path = task_wal_path(task_root(session.cwd, sid), task_name)
        key = (sid, str(path))
        async with self._task_lock:
            if self._writer is None or self._writer is self._tasks_closed_for:
                raise StoreClosed("the store is closed")
            dag = self._task_dags.get(key)
            if dag is not None:
                try:
                    current = await dag.refresh()
                except BaseException:  # not handed out again unless it is brought up to date
                    del self._task_dags[key]
                    raise
                if not current:
                    del self._task_dags[key]
                    dag = None
            if dag is None:
                dag = await TaskDag.open(
                    path, task_name, listener=partial(self._mirror_task, sid, task_name)
                )
                self._task_dags[key] = dag
                self._task_handles.add(dag)
        return dag

    async def _close_task_dags(self) -> None:
        """Refuse new task appends and wait for those in flight, while their events can land."""
        async with self._task_lock:
            self._tasks_closed_for = self._writer
            dags = list(self._task_handles)
            self._task_dags.clear()
            self._task_handles.clear()
        await asyncio.gather(*(dag.aclose() for dag in dags))  # each refuses from its first step

    async def _mirror_task(
        self, session_id: str, task_name: str, operation: str, arguments: dict[str, Any]
    ) -> None:
        await self.append_event(
            session_id, f"task_{operation}", payload={"task_name": task_name, **arguments}
        )
