"""The files of the task WAL: names, verified opens, a bounded set of open logs, raw I/O.

- :func:`task_wal_path` maps a task name to its file (below).
- :func:`open_log` opens with ``O_NOFOLLOW | O_NONBLOCK`` and refuses anything but a regular file
  (``TaskDagUnavailable``, line 0): a FIFO named like a log would block every reader forever, and
  a symbolic link could point the appends anywhere.
- :class:`LogFiles` keeps the descriptors of the task logs a process appends to, at most
  ``limit`` open at once (one process-wide instance, :data:`LOG_FILES`): to open one more, the
  least recently used idle descriptor is closed, and a log opened again must be the very file
  (device and inode) it was, else the append is refused as on a deleted log. A descriptor is
  used and closed only under its DAG's lock, so an append in flight is never left without it.

File name: ``task_wal_path(root, name)`` is ``root / f"{task_file_name(name)}.wal.jsonl"``. The
stem is a readable part (letters and digits of the name, other runs folded to ``_``, cut to 64
characters and 128 UTF-8 bytes), a ``-`` and the first 12 hex digits of the SHA-256 of the
exact UTF-8 name. The hash makes the mapping injective (also on case-insensitive file systems,
since it is lower-case hex) and the fixed ``-<hash>`` tail means no stem is empty, starts with a
dot, or is a Windows device name (``CON-…`` is not one).
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import re
import stat
import sys
import threading
from pathlib import Path
from typing import Final

from soong_store.errors import InvalidArgument, TaskDagUnavailable
from soong_store.tasks.threads import AnyLoopLock

WAL_SUFFIX: Final = ".wal.jsonl"
MAX_TASK_NAME: Final = 1000
FILE_LIMIT: Final = 64
_READABLE_CHARS: Final = 64
_READABLE_BYTES: Final = 128
_UNSAFE_RUN = re.compile(r"\W+|_+")
_NOT_REGULAR: Final = {errno.ELOOP, errno.EMLINK, errno.EISDIR, errno.ENXIO, errno.ENODEV}
_KINDS: Final = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)
_FLAGS: Final = (
    getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
)

Identity = tuple[int, int]


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


def _refuse(path: Path, mode: int) -> TaskDagUnavailable:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return TaskDagUnavailable(
        "task WAL cannot be replayed", path=path, line=0, reason=f"not a regular file: {kind}"
    )


def open_log(path: Path, *, write: bool, create: bool = False) -> int | None:
    """Open a task log (read-write in append mode, or read-only); None if it does not exist.

    Raises:
        TaskDagUnavailable: the path is a symbolic link, a FIFO, a directory or another
            non-regular file (``line`` is 0: no line of it was read).
        OSError: the file cannot be opened.
    """
    flags = _FLAGS | (os.O_RDWR | os.O_APPEND if write else os.O_RDONLY)
    try:
        fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o644)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as exc:
        if exc.errno not in _NOT_REGULAR:
            raise
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            raise exc from None
        if stat.S_ISREG(mode):
            raise
        raise _refuse(path, mode) from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(path, mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def identity(fd: int) -> Identity:
    """The device and inode of an open file: what a reopened log must match."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def read_from(fd: int, offset: int, end: int | None = None) -> bytes:
    """The bytes of ``fd`` from ``offset`` to ``end`` (default: to the end of the file)."""
    chunks = []
    while end is None or offset < end:
        chunk = os.pread(fd, 1 << 20 if end is None else min(1 << 20, end - offset), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def sync_data(fd: int) -> None:
    """Flush an append: ``fdatasync`` where there is one (size and data, not timestamps)."""
    sync = getattr(os, "fdatasync", None) or os.fsync
    sync(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (a short write goes on from where it stopped)."""
    written = os.write(fd, data)
    if written < len(data):
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


def fsync_dir(directory: Path) -> None:
    """Make a folder's new entries durable (nothing to do on Windows)."""
    if sys.platform == "win32":  # pragma: no cover
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LogFile:
    """One task log as this process knows it: its path, the file it must be, maybe a descriptor.

    ``identity`` is None until the file was seen (a DAG replayed from a missing file).
    ``owner`` is the lock of the DAG that appends to it: the descriptor is used only by whoever
    holds that lock, and closed only by whoever holds it or can take it without waiting.
    """

    __slots__ = ("__weakref__", "drop", "fd", "identity", "owner", "path", "used")

    def __init__(self, path: Path, identity: Identity | None = None) -> None:
        self.path = path
        self.identity = identity
        self.owner: AnyLoopLock | None = None
        self.fd: int | None = None
        self.used = 0
        self.drop = False


class LogFiles:
    """The open descriptors of the process's task logs, at most ``limit``, LRU first to close.

    :meth:`get` and :meth:`done` bracket a log's use by the holder of its ``owner`` lock; they
    take no lock of their own unless the log must be opened. To make room, a descriptor is
    closed only if its owner lock is free (taken without waiting while it closes), so an append
    in flight keeps its own. Every method is thread-safe.
    """

    def __init__(self, limit: int = FILE_LIMIT) -> None:
        self.limit = limit
        self._mutex = threading.Lock()
        self._open: dict[LogFile, None] = {}
        self.ticks = itertools.count(1)  # a log's use takes the next number: larger is newer

    def count(self) -> int:
        """How many task-log descriptors are open now."""
        return len(self._open)

    def get(self, log: LogFile, *, create: bool = False) -> int:
        """``log``'s descriptor, opened if needed; the caller holds ``log.owner``.

        Raises:
            FileNotFoundError: the log is not the file it was (deleted, or replaced), or is
                missing and ``create`` is false.
            TaskDagUnavailable: the path is not a regular file.
            OSError: the file cannot be opened.
        """
        log.used = next(self.ticks)
        fd = log.fd
        if fd is None:
            fd = self._reopen(log, create)
            self.adopt(log, fd)
        return fd

    def done(self, log: LogFile) -> None:
        """End a use begun with :meth:`get`: close the descriptor if it was to be dropped."""
        if log.drop:
            self.discard(log)

    def adopt(self, log: LogFile, fd: int) -> None:
        """Keep ``fd`` (just opened and verified) as ``log``'s descriptor."""
        with self._mutex:
            log.fd = fd
            self._open[log] = None
            victims = self._make_room(log)
        _close_all(victims)

    def discard(self, log: LogFile) -> None:
        """Close ``log``'s descriptor now; the caller holds ``log.owner`` or no DAG uses it."""
        with self._mutex:
            log.drop = False
            victims = [self._forget(log)] if log.fd is not None else []
        _close_all(victims)

    def close(self, log: LogFile) -> None:
        """From any thread: close ``log``'s descriptor now, or when the use in flight ends."""
        log.drop = True
        owner = log.owner
        if owner is None:
            self.discard(log)
        elif owner.try_acquire():
            try:
                self.discard(log)
            finally:
                owner.release()

    def _reopen(self, log: LogFile, create: bool) -> int:
        try:
            fd = open_log(log.path, write=True, create=create and log.identity is None)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            with self._mutex:  # out of descriptors: give back every idle one and try once more
                victims = self._make_room(log, keep=0)
            _close_all(victims)
            fd = open_log(log.path, write=True, create=create and log.identity is None)
        if fd is None:
            raise FileNotFoundError(errno.ENOENT, "the task WAL was deleted", str(log.path))
        found = identity(fd)
        if log.identity is None:
            log.identity = found
        elif found != log.identity:
            os.close(fd)
            raise FileNotFoundError(errno.ENOENT, "the task WAL was replaced", str(log.path))
        return fd

    def _make_room(self, new: LogFile, keep: int | None = None) -> list[int]:
        """Unlink the least recently used idle descriptors, ``new``'s aside, to close them.

        At most ``keep`` (default: the limit) stay open; the caller holds the mutex.
        """
        excess = len(self._open) - (self.limit if keep is None else keep)
        victims: list[int] = []
        if excess <= 0:
            return victims
        for log in sorted(self._open, key=_last_used):
            if excess <= 0:
                break
            owner = log.owner
            if log is new or (owner is not None and not owner.try_acquire()):
                continue  # in use: it stays open, over the limit, until a later turn
            try:
                victims.append(self._forget(log))
                excess -= 1
            finally:
                if owner is not None:
                    owner.release()
        return victims

    def _forget(self, log: LogFile) -> int:
        fd = log.fd
        assert fd is not None
        log.fd = None
        del self._open[log]
        return fd


def _last_used(log: LogFile) -> int:
    return log.used


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


LOG_FILES: Final = LogFiles()
"""The one set of task-log descriptors of this process."""
