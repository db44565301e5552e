"""The on-disk side of a task WAL append, run under the file's ``flock`` (often in a thread).

:class:`~soong_store.tasks.wal.TaskDag` plans an operation against its DAG, hands a
:class:`Step` to :func:`commit` and applies what comes back. The step carries what the DAG
knew (``known``); when the file holds more than that, the records other writers appended are
replayed onto it with every check of a replay (``after``) and the operation is planned again
against the result, so a record never conflicts with the file it lands in. Nothing here touches
the DAG itself: the event loop's thread does that, once the step is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soong_store.errors import InvalidArgument, NotFound, StorageError
from soong_store.tasks.files import (
    LOG_FILES,
    LogFile,
    fsync_dir,
    identity,
    open_log,
    read_from,
    sync_data,
    write_all,
)
from soong_store.tasks.task import FORMAT_VERSION, Task, WalState, encode_record, parse_log, plan
from soong_store.tasks.threads import Job, Worker, flock, funlock

logger = logging.getLogger("soong_store.tasks.wal")


class Step:
    """One append (or catch-up) on its way between the event loop and the file.

    The loop fills in what its DAG knew (``task_name``, ``tasks``, ``known_seq``, ``size``) and,
    for an append, the operation planned against it (``task_id``, ``task``, and ``data`` by
    :meth:`encode`). The thread that holds the flock may re-plan it after replaying what other
    writers appended (``after``), refuse it against that state (``refused``), find that the DAG
    cannot follow its file any more (``stale``), or that a failed append could not be rolled
    back (``broken``).
    """

    __slots__ = (
        "after",
        "args",
        "broken",
        "data",
        "known_seq",
        "op",
        "refused",
        "seq",
        "size",
        "stale",
        "task",
        "task_id",
        "task_name",
        "tasks",
    )

    def __init__(
        self,
        task_name: str,
        tasks: dict[str, Task],
        seq: int,
        size: int,
        op: str = "",
        args: dict[str, Any] | None = None,
    ) -> None:
        self.task_name = task_name
        self.tasks = tasks
        self.known_seq = seq
        self.size = size
        self.op = op
        self.args: dict[str, Any] = args if args is not None else {}
        self.task_id: str
        self.task: Task | None
        self.data: bytes
        self.seq: int
        self.after: WalState | None = None
        self.refused: InvalidArgument | NotFound | None = None
        self.stale = False
        self.broken: str | None = None

    def encode(self, record: bytes, seq: int) -> None:
        """Write ``record`` (number ``seq``), after the header when the file is empty."""
        self.seq, self.data = seq, record
        if self.size == 0:
            name = self.task_name
            header = encode_record(1, "header", {"version": FORMAT_VERSION, "task_name": name})
            self.data = header + record


def truncate_torn(fd: int, path: Path, state: WalState) -> None:
    """Cut a torn last record (never acknowledged) off the file, durably."""
    logger.warning("dropping a torn record (%d bytes) at the end of %s", state.torn_bytes, path)
    os.ftruncate(fd, state.size)
    os.fsync(fd)


def load(file: LogFile, task_name: str) -> WalState:
    """Replay ``file`` under its lock, truncating a torn last line; its descriptor stays open."""
    fd = open_log(file.path, write=True)
    if fd is None:
        return WalState(None)
    try:
        flock(fd)
        try:
            state = parse_log(read_from(fd, 0), file.path, task_name)
            if state.torn_bytes:
                truncate_torn(fd, file.path, state)
        finally:
            funlock(fd)
        file.identity = identity(fd)
    except BaseException:
        os.close(fd)
        raise
    LOG_FILES.adopt(file, fd)
    return state


def commit(file: LogFile, step: Step) -> None:
    """Append ``step`` under flock, after replaying what other writers appended meanwhile.

    A step the DAG already refused (``refused`` set) is only planned again if the file grew; it
    creates nothing, and a log that is gone leaves that refusal standing.
    """
    path = file.path
    new_dirs: list[Path] = []
    create = step.refused is None
    if file.identity is None and create:  # no file seen yet: create it, and its folders
        new_dirs = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = file.fd  # LOG_FILES.get's fast path, inline: this runs for every append
    if fd is None:
        try:
            fd = LOG_FILES.get(file, create=create)
        except FileNotFoundError:
            if step.refused is not None:
                return
            raise
    else:
        file.used = next(LOG_FILES.ticks)
    try:
        flock(fd)
        try:
            held = os.fstat(fd)
            if held.st_nlink == 0:
                # The descriptor points at a file no longer linked at the path (deleted, or
                # replaced by a rename): writing would append to a ghost. Drop it, and refuse
                # rather than recreate history. fstat is checked, not the path: a path lookup
                # per append costs a tenth of an fsync.
                file.drop = True
                if step.refused is not None:
                    return
                raise FileNotFoundError(
                    errno.ENOENT, "the task WAL was deleted or replaced", str(path)
                )
            if held.st_size != step.size:
                if not _replan(fd, path, held.st_size, step):
                    return
            elif step.refused is not None:
                return
            try:
                write_all(fd, step.data)
                sync_data(fd)
                if step.size == 0:
                    for directory in {path.parent, *(d.parent for d in new_dirs)}:
                        fsync_dir(directory)
            except OSError:
                _roll_back(fd, path, step)
                raise
        finally:
            funlock(fd)
    finally:
        if file.drop:
            LOG_FILES.discard(file)


def follow(file: LogFile, step: Step) -> None:
    """Catch up without appending, or mark the step stale (the file is not the one known)."""
    try:
        fd = LOG_FILES.get(file)
    except FileNotFoundError:
        step.stale = True
        return
    try:
        flock(fd)
        try:
            held = os.fstat(fd)
            if held.st_size < step.size or not _at_path(file):
                step.stale = True
            elif held.st_size > step.size:
                _catch_up(fd, file.path, held.st_size, step)
        finally:
            funlock(fd)
    finally:
        LOG_FILES.done(file)


def _at_path(file: LogFile) -> bool:
    """Whether the path still names the file (a log moved away keeps its link count)."""
    try:
        st = os.stat(file.path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == file.identity


def _replan(fd: int, path: Path, end: int, step: Step) -> bool:
    """Catch up with the file, then plan ``step`` again; False if it is now refused."""
    after = _catch_up(fd, path, end, step)
    try:
        step.task_id, step.task = plan(after.tasks, step.op, step.args)
    except (InvalidArgument, NotFound) as exc:
        step.refused = exc
        return False
    step.refused = None
    step.size = after.size
    seq = after.seq + 1 + (after.size == 0)
    step.encode(encode_record(seq, step.op, step.args), seq)
    return True


def _catch_up(fd: int, path: Path, end: int, step: Step) -> WalState:
    """Replay the bytes from ``step.size`` to ``end`` onto what the step knew (flock held)."""
    if end < step.size:
        message = f"task WAL {path} was changed by another writer; open it again"
        raise StorageError(message, path=path)
    known = WalState(step.task_name, step.tasks, step.known_seq, step.size)
    state = parse_log(read_from(fd, step.size, end), path, step.task_name, known)
    if state.torn_bytes:  # a writer died mid-append: a replay would drop it too
        truncate_torn(fd, path, state)
    step.after = state
    return state


def _roll_back(fd: int, path: Path, step: Step) -> None:
    try:
        os.ftruncate(fd, step.size)
    except OSError:
        step.broken = f"task WAL {path} may hold a failed append; open it again"
        return
    # The next successful append's fsync also makes this truncation durable; until then a
    # crash could only bring back a record whose fsync failed, never lose an acknowledged one.
    with contextlib.suppress(OSError):
        os.fsync(fd)


def run_step(file: LogFile, call: Callable[[LogFile, Step], None], step: Step, verb: str) -> None:
    """``call(file, step)`` in this thread, its ``OSError`` raised as a ``StorageError``."""
    try:
        call(file, step)
    except OSError as exc:
        message = f"cannot {verb} task WAL {file.path}: {exc}"
        raise StorageError(message, path=file.path) from exc


async def offload_step(
    worker: Worker, file: LogFile, call: Callable[[LogFile, Step], None], step: Step, verb: str
) -> bool:
    """:func:`run_step` in ``worker``'s thread; return whether the awaiting caller was cancelled.

    The work is never abandoned: a cancellation is noted and the wait goes on, so the caller
    learns whether an append reached the disk before it raises ``CancelledError``.
    """
    loop = asyncio.get_running_loop()
    job = Job(functools.partial(run_step, file, call, step, verb), loop)
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
