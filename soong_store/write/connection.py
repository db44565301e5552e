"""The writer's one connection: made at first use, reset after a failure, lent to a loop's batch.

:class:`~soong_store.write.writer.Writer` runs every write on the connection kept here. Its thread
makes it, uses it and closes it; a batch committed on an event loop's thread borrows it while
the thread is idle. Whoever uses it holds :attr:`WriteConnection.held`, so the two never
overlap. The thread waits for a database lock held elsewhere as the backend's busy handling
says; a borrower does not wait at all (it is refused at once and hands its batch to the
thread), so the connection's lock wait is switched as it changes hands.

Where commits run on event loops, the write connection leaves its checkpoints to the writer's
thread (:attr:`~soong_store.backends.base.Backend.commits_on_loop`): after a batch the user
asks :meth:`WriteConnection.claim_checkpoint`, and the thread runs :meth:`checkpoint` on a
second connection of its own.
"""

from __future__ import annotations

import contextlib
import logging
import threading

from sqlalchemy import Connection, Engine

from soong_store.backends.base import backend_class_of

log = logging.getLogger(__name__)


class WriteConnection:
    """The write connection of one writer, and the lock its user holds (see the module)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._dialect = backend_class_of(engine)
        self.held = threading.Lock()
        """Held by the connection's user: the writer's thread, or one loop's batch."""
        self._connection: Connection | None = None
        self._checkpointer: Connection | None = None
        self._waits_for_locks = True
        self.checkpoint_owed = False
        """A batch's commits owe a checkpoint, which the writer's thread runs."""

    def for_thread(self) -> Connection:
        """The connection, made (again) if it is not usable; it waits for locks held elsewhere."""
        connection = self._connection
        if connection is None or connection.invalidated or connection.closed:
            if connection is not None:
                self._connection = None
                connection.close()
            connection = self._engine.connect()  # may fail: the server is not back yet
            self._connection, self._waits_for_locks = connection, True
        elif not self._waits_for_locks:  # a loop's batch borrowed it last
            self._dialect.wait_for_locks(connection, True)
            self._waits_for_locks = True
        return connection

    def for_loop(self) -> Connection | None:
        """The connection for a loop's batch (``held`` held), refused locks failing at once.

        ``None`` until the thread has made it, or when it is not usable: the thread's work.
        """
        connection = self._connection
        if connection is None or connection.closed or connection.invalidated:
            return None
        if self._waits_for_locks:
            self._dialect.wait_for_locks(connection, False)
            self._waits_for_locks = False
        return connection

    def recover(self) -> None:
        """Leave no transaction open after a failed attempt, whatever state the failure left.

        A failure raised around COMMIT can leave the driver inside its transaction while
        SQLAlchemy believes it ended; the next begin-write would then fail forever.
        """
        connection = self._connection
        if connection is None or connection.closed:
            return
        if connection.invalidated:  # lost: the next attempt connects anew
            self._connection = None
            with contextlib.suppress(Exception):
                connection.close()
            return
        try:
            if connection.in_transaction():
                connection.rollback()
            raw = connection.connection.dbapi_connection
            if raw is not None and self._dialect.driver_in_transaction(connection):
                raw.rollback()
        except Exception:
            log.warning("write connection could not be reset; reconnecting", exc_info=True)
            self.drop()

    def drop(self) -> None:
        """Let go of the connection whatever its state: the next attempt connects anew."""
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.invalidate()
                connection.close()

    def claim_checkpoint(self) -> bool:
        """After a batch (``held`` held): whether its commits now owe a checkpoint."""
        connection = self._connection
        if connection is None or not self._dialect.claim_checkpoint(connection):
            return False
        self.checkpoint_owed = True
        return True

    def checkpoint(self) -> None:
        """The checkpoint owed, on the thread's own second connection (``held`` not held).

        Once while writes go on (it copies what was committed when it began); when the backend
        says the log has grown long, once more holding ``held`` (it copies the little committed
        meanwhile). A log copied whole is started again from its beginning by the next write;
        one never copied whole while writes go on would only grow. The second step keeps every
        writer of the store waiting for its syncs, hence only now and then.
        """
        self.checkpoint_owed = False
        try:
            checkpointer = self._checkpointer
            if checkpointer is None or checkpointer.closed or checkpointer.invalidated:
                checkpointer = self._checkpointer = self._engine.connect()
            if self._dialect.checkpoint(checkpointer):
                with self.held:
                    self._dialect.checkpoint(checkpointer)
        except Exception:  # the next commits' checkpoint tries again
            log.warning("WAL checkpoint failed", exc_info=True)
            checkpointer, self._checkpointer = self._checkpointer, None
            if checkpointer is not None:
                with contextlib.suppress(Exception):
                    checkpointer.close()

    def close(self) -> None:
        """Close both connections (the writer's thread, at its end)."""
        with self.held:
            if self._connection is not None:
                self._connection.close()
        if self._checkpointer is not None:
            self._checkpointer.close()
