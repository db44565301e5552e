"""Threads and locks of the task WAL: a mutex for any event loop, and the DAG's writer thread.

An ``asyncio.Lock`` belongs to the loop that first waits on it: used from a second loop it
raises ``RuntimeError``, or wakes a waiter from the wrong thread and leaves it asleep. A
``TaskDag`` (and the store's table of them) may be shared by threads that each run their own
loop, so :class:`AnyLoopLock` hands the lock over with ``call_soon_threadsafe`` on the waiter's
own loop. The writer thread (:class:`Worker`) serves jobs from any loop the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable
from types import TracebackType

if sys.platform == "win32":  # pragma: no cover

    def flock(fd: int) -> None:
        """No advisory locks on Windows; the DAG's own lock still serialises one process."""

    def funlock(fd: int) -> None:
        """Nothing to release without advisory locks."""

else:
    import fcntl

    def flock(fd: int) -> None:
        """Hold an exclusive advisory lock on ``fd``'s open file until :func:`funlock`."""
        fcntl.flock(fd, fcntl.LOCK_EX)

    def funlock(fd: int) -> None:
        """Release the lock taken by :func:`flock`, keeping ``fd`` open."""
        fcntl.flock(fd, fcntl.LOCK_UN)


class AnyLoopLock:
    """A fair mutex for coroutines of any event loop, in any thread; ``async with`` it.

    Ownership is a ``threading.Lock`` taken without blocking, so the fast path (free) is one C
    call; :meth:`try_acquire` is that path without even a coroutine. A waiter parks on a future
    of its own loop; ``release`` hands the lock to the oldest waiter by scheduling the grant on
    that loop, so the lock is never free while anyone waits and nobody can overtake.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()  # orders waiters against release
        self._owner = threading.Lock()  # held while a coroutine holds this lock
        self._waiters: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        """Whether a coroutine holds the lock."""
        return self._owner.locked()

    def try_acquire(self) -> bool:
        """Take the lock if it is free (then nobody waits for it either); never blocks."""
        return self._owner.acquire(False)

    async def acquire(self) -> None:
        """Wait until the lock is this caller's; a cancelled wait leaves the lock as it was."""
        if self._owner.acquire(False):
            return
        with self._guard:
            if self._owner.acquire(False):
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            with self._guard:
                if waiter in self._waiters:  # not chosen yet: simply leave the queue
                    self._waiters.remove(waiter)
                    raise
            # Chosen. A grant that found the waiter cancelled releases by itself; one that came
            # first made this caller the holder, so it must let go.
            if not waiter.cancelled():
                self.release()
            raise

    def release(self) -> None:
        """Hand the lock to the oldest waiter, or free it."""
        with self._guard:
            while self._waiters:
                waiter = self._waiters.popleft()
                try:
                    waiter.get_loop().call_soon_threadsafe(self._grant, waiter)
                except RuntimeError:  # that loop is closed: nobody is waiting there any more
                    continue
                return
            self._owner.release()

    def _grant(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done():  # cancelled after it was chosen: pass the lock on
            self.release()
        else:
            waiter.set_result(None)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class Job:
    """One write handed to a :class:`Worker`, and how the event loop learns that it ended.

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
        """Run the call in this thread and wake the waiting coroutine on its loop."""
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


class Worker:
    """The thread that runs one TaskDag's offloaded writes, started on demand.

    ``run_in_executor`` goes through a thread pool and chains a concurrent future to an asyncio
    one; a ``SimpleQueue`` and a single wake-up of the loop cost less (about a fifth of an
    offloaded append, measured on a 2-core machine). The thread is a daemon and ends after
    ``idle`` seconds without work, or at :meth:`stop` (the DAG's close); the DAG's lock
    serialises its appends, so one is enough. Each job wakes the loop it was submitted from,
    whichever that is.
    """

    def __init__(self, idle: float = 10.0) -> None:
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()  # None: stop
        self._mutex = threading.Lock()
        self._serving = 0  # the pid whose thread serves the queue: 0 once it ended
        self._thread: threading.Thread | None = None
        self._idle = idle

    def submit(self, job: Job) -> None:
        """Queue a job, starting the thread if none serves this process."""
        with self._mutex:
            if self._serving != os.getpid():  # none yet, ended, or left behind by fork
                self._thread = threading.Thread(target=self._serve, name="task-wal", daemon=True)
                self._thread.start()
                self._serving = os.getpid()
            self._jobs.put(job)

    def stop(self) -> None:
        """End the thread now rather than when idle, and wait for it (jobs queued are run first).

        A later :meth:`submit` starts a new one. Called by the DAG's close, so that a closed
        store leaves no thread behind.
        """
        with self._mutex:
            thread = self._thread if self._serving == os.getpid() else None
            if thread is None:
                return
            self._jobs.put(None)
        thread.join()

    def release(self) -> None:
        """Let the thread end once the jobs queued are run, without waiting for it.

        Never blocks nor takes a lock, so a finalizer may call it in any thread: a DAG
        collected without a close ends its thread now rather than after ``idle`` seconds.
        """
        self._jobs.put(None)

    def _serve(self) -> None:
        stopping = False
        while True:
            try:
                job = self._jobs.get(timeout=0 if stopping else self._idle)
            except queue.Empty:
                job = None
            if job is None:  # idle for a while, or stopped: end unless a job came meanwhile
                stopping = True
                with self._mutex:  # submit() holds it while it puts: no job is left behind
                    if self._jobs.empty():
                        self._serving = 0
                        self._thread = None
                        return
                continue
            job.run()
            del job  # the DAG it writes for is not kept alive by an idle thread
