"""Task write-ahead log: one JSONL file per named task, replayed into an in-memory DAG.

The file's name is described in :mod:`soong_store.tasks.files`, its records and operations in
:mod:`soong_store.tasks.task`.

Guarantees: every operation is validated against the DAG before anything is written; an append
is written, fsynced (the directory too when the file is created) and only then applied in
memory, so an acknowledged operation survives a crash and a failed one (``StorageError``) leaves
file and DAG as they were. Appends are serialised by the DAG's own lock (usable from any event
loop) and, across processes and DAGs, by ``flock``. Under that flock, records another writer
appended since this DAG last read the file are first replayed into it, with every check of a
replay, and the operation is validated again against the result; a file that shrank, was
deleted or was replaced is refused rather than written. On open, a torn last line (no newline:
a crash mid-append, never acknowledged) is dropped and truncated; any other damage raises
``TaskDagUnavailable`` with the path, the 1-based line and the reason. A path that is not a
regular file (a symbolic link, a FIFO, a directory ...) is refused the same way, with line 0,
and never read or written; the process keeps at most
``_task_files.FILE_LIMIT`` task logs open, more only while more appends are in flight (the least
recently used idle one is closed, and reopened, checked to be the same file, when next needed).
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Final, cast

from soong_store.errors import InvalidArgument, NotFound, StorageError, StoreClosed
from soong_store.model import codec
from soong_store.tasks.files import (
    LOG_FILES,
    WAL_SUFFIX,
    LogFile,
    open_log,
    read_from,
    task_file_name,
    task_root,
    task_wal_path,
)
from soong_store.tasks.log import Step, commit, follow, load, offload_step, run_step
from soong_store.tasks.task import (
    Task,
    TaskStatus,
    WalState,
    apply,
    decodes_to_itself,
    encode_record,
    parse_log,
    plan,
    ready,
    summary,
    topological_order,
)
from soong_store.tasks.threads import AnyLoopLock, Worker

__all__ = [
    "WAL_SUFFIX",
    "Task",
    "TaskDag",
    "TaskStatus",
    "WalState",
    "task_file_name",
    "task_root",
    "task_wal_path",
]

logger = logging.getLogger(__name__)

MAX_RECORD_BYTES: Final = 1 << 20

Listener = Callable[[str, dict[str, Any]], Awaitable[None]]


class TaskDag:
    """The DAG of one named task, backed by its write-ahead log; build it with :meth:`open`.

    Reads (``get``, ``tasks``, ``ready`` ...) are synchronous and see every acknowledged append.
    Appends hold the DAG's lock from validation to the in-memory update, so concurrent
    coroutines are applied in lock order and the file order is the DAG's history. The lock
    works from any event loop: one DAG may be shared by threads that each run their own loop,
    and reads from any thread see a consistent DAG. With ``offload=True`` (the default) the
    write and fsync run in a thread of the DAG's own (started on demand, ended when idle); an
    append whose caller is cancelled still finishes (it is applied if it reached the disk)
    before the ``CancelledError`` is raised, and its listener call is skipped. The listener
    runs under the lock, so it sees appends in file order; it must not append to the same
    ``TaskDag``.

    Another writer (a process, or a second ``TaskDag`` on the same file) may append too: each
    append first replays what the file gained, so a handle is never stale for long, and
    :meth:`refresh` catches up without appending. After :meth:`aclose` appends raise
    ``StoreClosed``. A DAG is always true (``if dag:``); ``len(dag)`` counts its tasks.
    """

    def __init__(
        self,
        path: Path,
        task_name: str,
        state: WalState,
        listener: Listener | None,
        offload: bool,
        file: LogFile | None = None,
    ) -> None:
        self.path = path
        self.task_name = task_name
        self._tasks: dict[str, Task] = dict(state.tasks)
        self._seq = state.seq
        self._size = state.size
        self._listener = listener
        self._lock = AnyLoopLock()
        self._broken: str | None = None
        self._closed = False
        self._file = file if file is not None else LogFile(path)
        self._file.owner = self._lock
        weakref.finalize(self, LOG_FILES.discard, self._file)
        self._worker = Worker() if offload else None
        if self._worker is not None:
            weakref.finalize(self, self._worker.release)

    @classmethod
    async def open(
        cls,
        path: Path,
        task_name: str,
        *,
        listener: Listener | None = None,
        offload: bool = True,
    ) -> TaskDag:
        """Replay the WAL at ``path`` (a missing file is an empty DAG; nothing is created yet).

        Args:
            path: The WAL file, normally ``task_wal_path(task_root, task_name)``.
            task_name: The original task name; it must match the file's header.
            listener: Awaited with ``(op, args)`` after each successful append; its failures
                are logged, never raised.
            offload: Run file I/O in a worker thread (False: inline, faster on fast disks but
                blocks the event loop for each fsync).

        Raises:
            InvalidArgument: ``task_name`` is not a valid task name.
            TaskDagUnavailable: the file is damaged, belongs to another task name, or is not a
                regular file (``line`` 0).
            StorageError: the file cannot be read.
        """
        task_file_name(task_name)
        path = Path(path)
        file = LogFile(path)
        try:
            if offload:
                state = await asyncio.to_thread(load, file, task_name)
            else:
                state = load(file, task_name)
        except OSError as exc:
            raise StorageError(f"cannot read task WAL {path}: {exc}", path=path) from exc
        return cls(path, task_name, state, listener, offload, file)

    @classmethod
    def from_state(cls, path: Path, task_name: str, state: WalState) -> TaskDag:
        """A read-only DAG over what :meth:`replay` found: reads work, appends are refused.

        It is a snapshot: building it touches no file, later changes to the log are not seen,
        and an append raises ``StorageError`` before any I/O, so nothing is ever written through
        it. Use :meth:`open` for a DAG that appends.

        Args:
            path: The WAL file ``state`` was replayed from.
            task_name: The original task name (the header's, when the file exists).
            state: What ``TaskDag.replay(path, task_name)`` returned.

        Raises:
            InvalidArgument: ``task_name`` is not a valid task name, or not the one in ``state``.
        """
        task_file_name(task_name)
        if state.task_name not in (None, task_name):
            raise InvalidArgument(
                f"task WAL {path} holds task {state.task_name!r}, not {task_name!r}"
            )
        view = cls(Path(path), task_name, state, None, offload=False)
        view._broken = f"task WAL {path} was opened read-only; use TaskDag.open to append"
        return view

    @staticmethod
    def replay(path: Path, task_name: str | None = None) -> WalState:
        """Read ``path`` without changing it (a torn tail is only reported in ``torn_bytes``).

        Raises:
            TaskDagUnavailable: the file is damaged (or its header names another task), or is
                not a regular file (``line`` 0; a FIFO is never waited on).
            StorageError: the file exists but cannot be read.
        """
        path = Path(path)
        try:
            fd = open_log(path, write=False)
            if fd is None:
                return WalState(None)
            try:
                data = read_from(fd, 0)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StorageError(f"cannot read task WAL {path}: {exc}", path=path) from exc
        return parse_log(data, path, task_name)

    @property
    def seq(self) -> int:
        """The sequence number of the last record in the file (0 before the first append)."""
        return self._seq

    def __bool__(self) -> bool:
        """Always true: an empty DAG is still a DAG (``if dag:`` must not skip it)."""
        return True

    def __len__(self) -> int:
        """The number of tasks."""
        return len(self._tasks)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._tasks

    async def add(
        self, task_id: str, title: str, depends_on: Iterable[str] = (), metadata: Any = None
    ) -> Task:
        """Add a pending task after the tasks it depends on (all must exist)."""
        if isinstance(depends_on, str | bytes) or not isinstance(depends_on, Iterable):
            raise InvalidArgument(f"depends_on must be an iterable of task ids, not {depends_on!r}")
        args = {"task_id": task_id, "title": title, "depends_on": list(depends_on)}
        return cast(Task, await self._append("add", {**args, "metadata": metadata}))

    async def set_status(self, task_id: str, status: TaskStatus | str) -> Task:
        """Set the status of a task (any status may follow any other)."""
        if isinstance(status, TaskStatus):
            status = str(status)  # the plain string a replay decodes
        return cast(Task, await self._append("set_status", {"task_id": task_id, "status": status}))

    async def add_dependency(self, task_id: str, depends_on: str) -> Task:
        """Make ``task_id`` wait for ``depends_on``; refused if it would close a cycle."""
        args = {"task_id": task_id, "depends_on": depends_on}
        return cast(Task, await self._append("add_dependency", args))

    async def remove_dependency(self, task_id: str, depends_on: str) -> Task:
        """Drop the edge from ``task_id`` to ``depends_on`` (NotFound if there is none)."""
        args = {"task_id": task_id, "depends_on": depends_on}
        return cast(Task, await self._append("remove_dependency", args))

    async def update(self, task_id: str, *, title: str | None = None, metadata: Any = None) -> Task:
        """Change the title and/or metadata; ``None`` leaves a field as it is."""
        args: dict[str, Any] = {"task_id": task_id}
        if title is not None:
            args["title"] = title
        if metadata is not None:
            args["metadata"] = metadata
        return cast(Task, await self._append("update", args))

    async def remove(self, task_id: str) -> None:
        """Remove a task; refused (InvalidArgument) while another task depends on it."""
        await self._append("remove", {"task_id": task_id})

    def get(self, task_id: str) -> Task:
        """Return the task ``task_id`` (NotFound if there is none)."""
        task = self._tasks.get(task_id)
        if task is None:
            raise NotFound(f"no task {task_id!r} in {self.task_name!r}", task_id=task_id)
        return task

    def tasks(self) -> list[Task]:
        """Return every task in insertion order."""
        return list(self._tasks.values())

    def ready(self) -> list[Task]:
        """Return the pending tasks whose dependencies are all completed, in insertion order."""
        return ready(self._tasks)

    def topological_order(self) -> list[Task]:
        """Return the tasks dependencies first, ties broken by insertion order."""
        return topological_order(self._tasks)

    def summary(self, *, max_tasks: int = 40, max_width: int = 160) -> str:
        """Render counts per status, one line per task and the ready set, for a ``task_board``.

        At most ``max_tasks`` task lines (the rest are counted) and ``max_width`` characters per
        line, so the text stays bounded whatever the DAG holds.
        """
        return summary(self.task_name, self._tasks, max_tasks=max_tasks, max_width=max_width)

    async def refresh(self) -> bool:
        """Catch up with records other writers appended since this DAG last read its file.

        Costs one ``stat`` when the file did not change. ``SessionStore.task_dag`` calls it, so
        the DAG it returns reflects the file.

        Returns:
            True when the DAG now reflects the file; False when it cannot follow the file any
            more (deleted, moved, replaced or cut short, left unsure by a failed rollback, or
            closed): its appends are refused from then on, open it again.

        Raises:
            TaskDagUnavailable: the new records are damaged, or the path is no longer a regular
                file (the DAG stays as it was).
            StorageError: the file cannot be read.
        """
        if self._closed or self._broken is not None:
            return False
        if self._unchanged():
            return True
        async with self._lock:
            if self._closed or self._broken is not None:
                return False
            step = Step(self.task_name, self._tasks, self._seq, self._size)
            interrupted = False
            if self._worker is None:
                self._run(follow, step, "read")
            else:
                interrupted = await self._offload(self._worker, follow, step, "read")
            if step.stale:
                self._broken = (
                    f"task WAL {self.path} is no longer the file this DAG read (deleted, "
                    "moved, replaced or cut short); open it again"
                )
            if interrupted:
                raise asyncio.CancelledError
            return not step.stale

    def _unchanged(self) -> bool:
        """Whether the path still names the file this DAG read, at the size it read (one stat)."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return self._file.identity is None
        except OSError:
            return False  # the locked look that follows says what is wrong
        return (st.st_dev, st.st_ino) == self._file.identity and st.st_size == self._size

    async def aclose(self) -> None:
        """Refuse further appends (``StoreClosed``), wait for the one in flight, release the file.

        Once it returns, no append of this DAG runs or starts, an append it refused left
        nothing in the log, and its writer thread has ended. Reads keep working. Closing twice
        is harmless.
        """
        self._closed = True
        async with self._lock:
            LOG_FILES.discard(self._file)
            if self._worker is not None:  # idle: the last job's caller has been woken
                self._worker.stop()

    def close(self) -> None:
        """Release the file now, or when the append in flight ends; a later append reopens it.

        A reopened log must be the file this DAG read (same device and inode), else the append
        is refused as on a deleted log.
        """
        LOG_FILES.close(self._file)

    async def _append(self, op: str, args: dict[str, Any]) -> Task | None:
        """Validate, write, fsync and apply one operation; return the task's new value."""
        if not self._lock.try_acquire():
            await self._lock.acquire()
        try:
            if self._closed:
                raise StoreClosed(f"task DAG {self.task_name!r} is closed", path=self.path)
            if self._broken is not None:
                raise StorageError(self._broken, path=self.path)
            first = self._size == 0
            seq = self._seq + 1 + first
            plain = decodes_to_itself(args)
            record = encode_record(seq, op, args, plain=plain)
            if len(record) > MAX_RECORD_BYTES:
                raise InvalidArgument(f"task {op} record exceeds {MAX_RECORD_BYTES} bytes")
            if not plain:
                args = codec.loads(record)["args"]  # exactly what a replay will see
            step = Step(self.task_name, self._tasks, self._seq, self._size, op, args)
            try:
                step.task_id, step.task = plan(self._tasks, op, args)
            except (InvalidArgument, NotFound) as exc:
                if self._unchanged():
                    raise
                step.refused = exc  # unless the records another writer added allow it
            if first:
                step.encode(record, seq)
            else:
                step.seq, step.data = seq, record
            interrupted = False
            if self._worker is None:
                self._run(commit, step, "append to")
            else:
                interrupted = await self._offload(self._worker, commit, step, "append to")
            if step.refused is not None:
                raise step.refused
            task_id, task = step.task_id, step.task
            if task is not None and task_id in self._tasks:
                self._tasks[task_id] = task
            else:  # a new dict: a reader iterating the old one in another thread is unharmed
                tasks = dict(self._tasks)
                apply(tasks, task_id, task)
                self._tasks = tasks
            self._seq, self._size = step.seq, step.size + len(step.data)
            if interrupted:
                raise asyncio.CancelledError
            if self._listener is not None:
                try:
                    await self._listener(op, step.args)
                except Exception:
                    logger.warning(
                        "task WAL listener failed for %s %s", op, self.path, exc_info=True
                    )
            return step.task
        finally:
            self._lock.release()

    def _run(self, call: Callable[[LogFile, Step], None], step: Step, verb: str) -> None:
        """Run ``call(file, step)`` in this thread, then take what it caught up."""
        try:
            run_step(self._file, call, step, verb)
        finally:
            self._take(step)

    async def _offload(
        self, worker: Worker, call: Callable[[LogFile, Step], None], step: Step, verb: str
    ) -> bool:
        """:meth:`_run` in the worker thread; return whether the caller was cancelled."""
        try:
            return await offload_step(worker, self._file, call, step, verb)
        finally:
            self._take(step)

    def _take(self, step: Step) -> None:
        """Follow what another writer appended (it is in the file), or a failed rollback."""
        if step.after is not None:
            self._tasks, self._seq, self._size = step.after.tasks, step.after.seq, step.after.size
        if step.broken is not None:
            self._broken = step.broken
