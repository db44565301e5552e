"""Task write-ahead log: one JSONL file per named task, replayed into an in-memory DAG.

File name: ``task_wal_path(root, name)`` is ``root / f"{task_file_name(name)}.wal.jsonl"``. The
stem is a readable part (letters and digits of the name, other runs folded to ``_``, cut to 64
characters and 128 UTF-8 bytes), a ``-`` and the first 12 hex digits of the SHA-256 of the
exact UTF-8 name. The hash makes the mapping injective (also on case-insensitive file systems,
since it is lower-case hex) and the fixed ``-<hash>`` tail means no stem is empty, starts with a
dot, or is a Windows device name (``CON-…`` is not one).

Records: one line each, ``{"seq":N,"op":"…","args":{…},"crc":"xxxxxxxx"}`` and a newline, as
orjson writes it. ``seq`` is the 1-based line number (dense: no gap, no repeat). ``crc`` is the
CRC-32, as 8 lower-case hex digits, of the line's bytes with the ``,"crc":"xxxxxxxx"`` member
removed, i.e. of the compact JSON ``{"seq":N,"op":"…","args":{…}}`` as written. Line 1 is the
header, ``op="header"`` with ``args={"version":1,"task_name":<original name>}``. The other
operations and their ``args`` are::

    add                task_id, title, depends_on (list of ids), metadata (any JSON value)
    set_status         task_id, status (pending|in_progress|completed|failed|cancelled)
    add_dependency     task_id, depends_on (one id)
    remove_dependency  task_id, depends_on (one id)
    update             task_id, and title and/or metadata
    remove             task_id (refused while another task depends on it)

Guarantees: every operation is validated against the DAG before anything is written; an append
is written, fsynced (the directory too when the file is created) and only then applied in
memory, so an acknowledged operation survives a crash and a failed one (``StorageError``) leaves
file and DAG as they were. Appends are serialised by an ``asyncio.Lock`` and, across processes,
by ``flock``; a file grown by another writer is refused rather than overwritten. On open, a torn
last line (no newline: a crash mid-append, never acknowledged) is dropped and truncated; any other
damage raises ``TaskDagUnavailable`` with the path, the 1-based line and the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import hashlib
import logging
import os
import queue
import re
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Final, cast

from soong_store._task_model import (
    FORMAT_VERSION,
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
from soong_store.errors import InvalidArgument, NotFound, StorageError
from soong_store.model import codec

__all__ = ["Task", "TaskDag", "TaskStatus", "WalState", "task_file_name", "task_wal_path"]

log = logging.getLogger(__name__)

WAL_SUFFIX: Final = ".wal.jsonl"
MAX_TASK_NAME: Final = 1000
MAX_RECORD_BYTES: Final = 1 << 20
_READABLE_CHARS: Final = 64
_READABLE_BYTES: Final = 128
_UNSAFE_RUN = re.compile(r"\W+|_+")

Listener = Callable[[str, dict[str, Any]], Awaitable[None]]

if sys.platform == "win32":  # pragma: no cover

    def _lock(fd: int) -> None:
        """No advisory locks on Windows; the asyncio lock still serialises one process."""

    def _unlock(fd: int) -> None:
        """Nothing to release without advisory locks."""

else:
    import fcntl

    def _lock(fd: int) -> None:
        """Hold an exclusive advisory lock until ``fd`` is closed."""
        fcntl.flock(fd, fcntl.LOCK_EX)

    def _unlock(fd: int) -> None:
        """Release the lock taken by :func:`_lock`, keeping ``fd`` open."""
        fcntl.flock(fd, fcntl.LOCK_UN)


def task_file_name(task_name: str) -> str:
    """Map a model-chosen task name to a safe, injective file stem (without ``.wal.jsonl``).

    Raises:
        InvalidArgument: the name is not a non-empty string of at most 1,000 characters, or is
            not encodable as UTF-8.
    """
    if not isinstance(task_name, str) or not task_name:
        raise InvalidArgument(f"task name must be a non-empty string, not {task_name!r}")
    if len(task_name) > MAX_TASK_NAME:
        raise InvalidArgument(f"task name is longer than {MAX_TASK_NAME} characters")
    try:
        raw = task_name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"task name {task_name!r} is not valid Unicode") from exc
    readable = _UNSAFE_RUN.sub("_", task_name)[:_READABLE_CHARS]
    while len(readable.encode("utf-8")) > _READABLE_BYTES:
        readable = readable[:-1]
    return f"{readable}-{hashlib.sha256(raw).hexdigest()[:12]}"


def task_root(cwd: str | os.PathLike[str], session_id: str) -> Path:
    """The folder of a session's task logs: ``<cwd>/.soong-agent/tasks/<session_id>``."""
    return Path(cwd) / ".soong-agent" / "tasks" / session_id


def task_wal_path(task_root: Path, task_name: str) -> Path:
    """Return the WAL file of ``task_name`` inside ``task_root`` (the session's task folder)."""
    return Path(task_root) / f"{task_file_name(task_name)}{WAL_SUFFIX}"


def _sync_data(fd: int) -> None:
    """Flush an append: ``fdatasync`` where there is one (size and data, not timestamps)."""
    sync = getattr(os, "fdatasync", None) or os.fsync
    sync(fd)


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written < len(data):
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


def _fsync_dir(directory: Path) -> None:
    if sys.platform == "win32":  # pragma: no cover
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Job:
    """One write handed to a :class:`_Worker`, and how the event loop learns that it ended.

    ``done`` and ``error`` are set in the worker thread before the loop is woken; ``waiter`` is
    only touched in the loop's thread, so a cancelled waiter can be replaced without a race.
    """

    __slots__ = ("call", "done", "error", "loop", "waiter")

    def __init__(self, call: Callable[[], None], loop: asyncio.AbstractEventLoop) -> None:
        self.call = call
        self.loop = loop
        self.waiter: asyncio.Future[None] = loop.create_future()
        self.done = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.call()
        except BaseException as exc:  # handed to the awaiting coroutine
            self.error = exc
        self.done = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self.loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if not self.waiter.done():
            self.waiter.set_result(None)


class _Worker:
    """The thread that runs one TaskDag's offloaded writes, started on demand.

    ``run_in_executor`` goes through a thread pool and chains a concurrent future to an asyncio
    one; a ``SimpleQueue`` and a single wake-up of the loop cost less (about a fifth of an
    offloaded append, measured on a 2-core machine). The thread is a daemon and ends after
    ``idle`` seconds without work; the DAG's lock serialises its appends, so one is enough.
    """

    def __init__(self, idle: float = 10.0) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._mutex = threading.Lock()
        self._serving = 0  # the pid whose thread serves the queue: 0 once it ended when idle
        self._idle = idle

    def submit(self, job: _Job) -> None:
        with self._mutex:
            if self._serving != os.getpid():  # none yet, ended when idle, or left behind by fork
                threading.Thread(target=self._serve, name="task-wal", daemon=True).start()
                self._serving = os.getpid()
            self._jobs.put(job)

    def _serve(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._idle)
            except queue.Empty:
                with self._mutex:  # submit() holds it while it puts: no job is left behind
                    if self._jobs.empty():
                        self._serving = 0
                        return
                continue
            job.run()
            del job  # the DAG it writes for is not kept alive by an idle thread


def _load(path: Path, task_name: str) -> WalState:
    """Replay ``path`` under its lock, truncating a torn last line (runs in a worker thread)."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return WalState(None)
    try:
        _lock(fd)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        state = parse_log(b"".join(chunks), path, task_name)
        if state.torn_bytes:
            log.warning(
                "dropping a torn record (%d bytes) at the end of %s", state.torn_bytes, path
            )
            os.ftruncate(fd, state.size)
            os.fsync(fd)
        return state
    finally:
        os.close(fd)


class TaskDag:
    """The DAG of one named task, backed by its write-ahead log; build it with :meth:`open`.

    Reads (``get``, ``tasks``, ``ready`` ...) are synchronous and see every acknowledged append.
    Appends hold an ``asyncio.Lock`` from validation to the in-memory update, so concurrent
    coroutines are applied in lock order and the file order is the DAG's history. With
    ``offload=True`` (the default) the write and fsync run in a thread of the DAG's own (started
    on demand, ended when idle); an append whose caller is cancelled still finishes (it is
    applied if it reached the disk) before the ``CancelledError`` is raised, and its listener
    call is skipped. The listener runs under the lock, so it sees appends in file order; it must
    not append to the same ``TaskDag``.
    """

    def __init__(
        self, path: Path, task_name: str, state: WalState, listener: Listener | None, offload: bool
    ) -> None:
        self.path = path
        self.task_name = task_name
        self._tasks: dict[str, Task] = dict(state.tasks)
        self._seq = state.seq
        self._size = state.size
        self._listener = listener
        self._lock = asyncio.Lock()
        self._broken: str | None = None
        self._fd: int | None = None  # kept open between appends: open/close cost more than fsync
        self._worker = _Worker() if offload else None

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
            TaskDagUnavailable: the file is damaged or belongs to another task name.
            StorageError: the file cannot be read.
        """
        task_file_name(task_name)
        path = Path(path)
        try:
            if offload:
                state = await asyncio.to_thread(_load, path, task_name)
            else:
                state = _load(path, task_name)
        except OSError as exc:
            raise StorageError(f"cannot read task WAL {path}: {exc}", path=path) from exc
        return cls(path, task_name, state, listener, offload)

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
            TaskDagUnavailable: the file is damaged (or its header names another task).
            StorageError: the file exists but cannot be read.
        """
        path = Path(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return WalState(None)
        except OSError as exc:
            raise StorageError(f"cannot read task WAL {path}: {exc}", path=path) from exc
        return parse_log(data, path, task_name)

    @property
    def seq(self) -> int:
        """The sequence number of the last record in the file (0 before the first append)."""
        return self._seq

    def __len__(self) -> int:
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

    async def _append(self, op: str, args: dict[str, Any]) -> Task | None:
        """Validate, write, fsync and apply one operation; return the task's new value."""
        await self._lock.acquire()
        try:
            if self._broken is not None:
                raise StorageError(self._broken, path=self.path)
            first = self._size == 0
            seq = self._seq + 1 + first
            record = encode_record(seq, op, args)
            if len(record) > MAX_RECORD_BYTES:
                raise InvalidArgument(f"task {op} record exceeds {MAX_RECORD_BYTES} bytes")
            if not decodes_to_itself(args):
                args = codec.loads(record)["args"]  # exactly what a replay will see
            task_id, task = plan(self._tasks, op, args)
            data = record
            if first:
                header = {"version": FORMAT_VERSION, "task_name": self.task_name}
                data = encode_record(1, "header", header) + record
            try:
                if self._worker is not None:
                    interrupted = await self._io(self._worker, data)
                else:
                    interrupted = False
                    self._write(data, self._size)
            except OSError as exc:
                raise StorageError(
                    f"cannot append to task WAL {self.path}: {exc}", path=self.path
                ) from exc
            apply(self._tasks, task_id, task)
            self._seq, self._size = seq, self._size + len(data)
            if interrupted:
                raise asyncio.CancelledError
            if self._listener is not None:
                try:
                    await self._listener(op, args)
                except Exception:
                    log.warning("task WAL listener failed for %s %s", op, self.path, exc_info=True)
            return task
        finally:
            self._lock.release()

    async def _io(self, worker: _Worker, data: bytes) -> bool:
        """Run :meth:`_write` in the worker thread; return whether the caller was cancelled.

        The write is never abandoned: a cancellation is noted and the wait goes on, so the
        caller learns whether the append reached the disk before ``CancelledError`` is raised.
        """
        loop = asyncio.get_running_loop()
        job = _Job(functools.partial(self._write, data, self._size), loop)
        worker.submit(job)
        interrupted = False
        while not job.done:
            try:
                await job.waiter
            except asyncio.CancelledError:
                interrupted = True
                job.waiter = loop.create_future()
        if job.error is not None:
            raise job.error
        return interrupted

    def _write(self, data: bytes, size: int) -> None:
        """Append and fsync ``data`` to a file of ``size`` bytes under flock, or leave it as is."""
        new_dirs: list[Path] = []
        if size == 0:
            new_dirs = [d for d in (self.path.parent, *self.path.parent.parents) if not d.exists()]
            self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = self._open_fd(create=size == 0)
        stale = False
        _lock(fd)
        try:
            held = os.fstat(fd)
            if held.st_nlink == 0:
                # The kept descriptor points at a file no longer linked at the path (deleted, or
                # replaced by a rename): writing would append to a ghost. Drop it, and refuse
                # rather than recreate history. fstat is checked, not the path: a path lookup
                # per append costs a tenth of an fsync.
                stale = True
                raise FileNotFoundError(
                    errno.ENOENT, "the task WAL was deleted or replaced", str(self.path)
                )
            if held.st_size != size:
                raise StorageError(
                    f"task WAL {self.path} was changed by another writer; open it again",
                    path=self.path,
                )
            try:
                _write_all(fd, data)
                _sync_data(fd)
                if size == 0:
                    for directory in {self.path.parent, *(d.parent for d in new_dirs)}:
                        _fsync_dir(directory)
            except OSError:
                self._roll_back(fd, size)
                raise
        finally:
            _unlock(fd)
            if stale:
                self.close()

    def _open_fd(self, *, create: bool) -> int:
        if self._fd is None:
            flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
            self._fd = os.open(self.path, flags | (os.O_CREAT if create else 0), 0o644)
            self._closer = weakref.finalize(self, os.close, self._fd)
        return self._fd

    def close(self) -> None:
        """Release the file; a later append opens it again."""
        if self._fd is not None:
            self._closer()
            self._fd = None

    def _roll_back(self, fd: int, size: int) -> None:
        try:
            os.ftruncate(fd, size)
        except OSError:
            self._broken = f"task WAL {self.path} may hold a failed append; open it again"
            return
        # The next successful append's fsync also makes this truncation durable; until then a
        # crash could only bring back a record whose fsync failed, never lose an acknowledged one.
        with contextlib.suppress(OSError):
            os.fsync(fd)
