"""WAL checkpoints of a SQLite store in a thread of their own, beside the writer.

SQLite checkpoints its WAL file at the end of the ``COMMIT`` that takes it past 1,000 pages
(``wal_autocheckpoint``), in the committing thread: it syncs the WAL, copies the pages into the
database file and syncs that, so every ~80th append of the writer waited for two fsyncs and the
copy. The :class:`Checkpointer` runs passive checkpoints on a connection of its own, soon after
the writer has committed: a passive checkpoint takes no lock a writer waits for, so the copying
and syncing go on while the writer commits, and the writer's own automatic checkpoint, left on
as the bound of the WAL's size, finds little or nothing left to copy. Durability is unchanged: a
checkpoint only moves pages that are committed already, and SQLite syncs the WAL before it
copies them, as it does in the writer.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sqlalchemy import Engine

log = logging.getLogger(__name__)

CHECKPOINT = "PRAGMA wal_checkpoint(PASSIVE)"
INTERVAL_S = 0.025
"""The shortest time between two checkpoints: each syncs two files, so they are not run after
every commit, and within it the writer adds ~25 ms of pages (a few hundred at full speed),
fewer than the 1,000 at which its own checkpoint would run first."""


class Checkpointer:
    """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` on ``engine`` after commits, in its own thread.

    Contract: :meth:`committed` (called by the writer after each batch) is cheap and never
    blocks; a checkpoint follows within about :data:`INTERVAL_S`. A failed checkpoint is logged
    and its connection dropped (the next one connects anew); it harms no write, since the
    writer's automatic checkpoint still bounds the WAL. :meth:`close` ends the thread and its
    connection; the engine is the caller's to dispose of.
    """

    def __init__(self, engine: Engine, interval: float = INTERVAL_S) -> None:
        self._engine = engine
        self._interval = interval
        self._due = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._main, name="soong-store-checkpoint", daemon=True
        )
        self.checkpoints = 0
        """How many checkpoints ran (tests and benchmarks read it)."""

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def committed(self) -> None:
        """Note that the writer committed: a checkpoint is due (no system call if one is)."""
        if not self._due.is_set():
            self._due.set()

    def close(self) -> None:
        """Stop the thread (a checkpoint under way finishes first) and close its connection."""
        self._stop.set()
        self._due.set()
        if self._thread.is_alive():
            self._thread.join()

    def _main(self) -> None:
        connection: Any = None
        try:
            while True:
                self._due.wait()
                if self._stop.is_set():
                    return
                self._due.clear()
                try:
                    if connection is None:
                        connection = self._engine.raw_connection()
                    cursor = connection.cursor()
                    try:
                        cursor.execute(CHECKPOINT)
                        cursor.fetchall()
                    finally:
                        cursor.close()
                    self.checkpoints += 1
                except Exception:
                    log.warning("WAL checkpoint failed (the writer's own still runs)", exc_info=True)
                    connection = _closed(connection)
                if self._stop.wait(self._interval):
                    return
        finally:
            _closed(connection)


def _closed(connection: Any) -> None:
    """Close ``connection`` if there is one, whatever state it is in."""
    if connection is not None:
        try:
            connection.close()
        except Exception:
            log.warning("could not close the checkpoint connection", exc_info=True)
