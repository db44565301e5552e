"""Artifact files written in the background from the moment a unit of work adds them.

A spilled JSON block's file starts on its way to disk as soon as its bytes exist. Meanwhile the
event loop's thread goes on checking the same bytes for NaN and validating the rest of the unit. The
unit's job is queued to the writer once all its files are durable
(:meth:`soong_store.write.writer.Writer.submit` with ``after=``). A unit that ends without
committing drops its files, and each is removed as soon as its write is over.

Why a handshake: a worker woken while the caller keeps running Python holds no GIL, so it
cannot even issue its ``write`` until the caller blocks, and nothing would overlap.
:meth:`FilePool.start` therefore waits, briefly and only when a worker is idle, until the worker
is about to write. The temporary file is opened ``O_SYNC``, so the write and its flush to disk
are one call that runs without the GIL.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from soong_store.backends.base import translate
from soong_store.errors import SoongStoreError, StoreClosed
from soong_store.files.folder import ArtifactFiles

log = logging.getLogger(__name__)

_WORKERS = 4
_HANDOFF_WAIT_S = 0.002
"""How long :meth:`FilePool.start` waits for an idle worker to begin; it goes on regardless."""


class FileWrite:
    """One artifact file being written by the pool; its unit commits it or drops it.

    It is the :class:`~soong_store.files.folder.PendingFile` that artifact operations hold.
    """

    __slots__ = ("path", "_files", "_lock", "_finished", "_error", "_dropped", "_callbacks")

    def __init__(self, path: str, files: ArtifactFiles) -> None:
        self.path = path
        self._files = files
        self._lock = threading.Lock()
        self._finished = False
        self._error: SoongStoreError | None = None
        self._dropped = False
        self._callbacks: list[Callable[[], None]] = []

    def error(self) -> SoongStoreError | None:
        """Why the write failed (``None`` while it runs or once it succeeded)."""
        return self._error

    def when_done(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the write is over: now if it is, else in the pool's thread."""
        with self._lock:
            if not self._finished:
                self._callbacks.append(callback)
                return
        callback()

    def drop(self) -> None:
        """The unit will not commit: remove the file once it is written (now, if it is)."""
        with self._lock:
            if self._dropped:
                return
            self._dropped = True
            finished = self._finished
        if finished:
            self._remove()

    def _finish(self, error: SoongStoreError | None) -> None:
        with self._lock:
            self._finished, self._error = True, error
            callbacks, self._callbacks = self._callbacks, []
            dropped = self._dropped
        if dropped:
            self._remove()
        for callback in callbacks:
            try:
                callback()
            except Exception:  # the pool thread must live on
                log.exception("a callback of the write of %s raised", self.path)

    def _remove(self) -> None:
        if self._error is None:  # a failed write removed its temporary file itself
            self._files.discard([self.path])


_Item = tuple[FileWrite, bytes, threading.Event]


class FilePool:
    """A few threads that write artifact files, in the order they were started."""

    def __init__(self, files: ArtifactFiles, workers: int = _WORKERS) -> None:
        self._files = files
        self._workers = workers
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    def start(self, path: str, data: bytes) -> FileWrite:
        """Begin writing ``data`` at ``path`` (``<session>/<file>``) atomically and durably."""
        write = FileWrite(path, self._files)
        begun = threading.Event()
        with self._lock:
            if self._closed:
                raise StoreClosed("the store is closed: no more writes")
            handed = self._idle > 0
            if not handed and len(self._threads) < self._workers:
                thread = threading.Thread(target=self._run, name="soong-store-files", daemon=True)
                self._threads.append(thread)
                thread.start()
                handed = True
            self._queue.put((write, data, begun))
        if handed:
            begun.wait(_HANDOFF_WAIT_S)
        return write

    def close(self) -> None:
        """Finish every write already started, then stop the threads."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._queue.put(None)
        for thread in threads:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            item = self._queue.get()
            with self._lock:
                self._idle -= 1
            if item is None:
                return
            write, data, begun = item
            try:
                self._files.write(write.path, data, begun=begun.set)
            except Exception as exc:
                begun.set()
                write._finish(translate(exc))
            else:
                write._finish(None)
