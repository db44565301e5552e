"""The write connection's lock wait and checkpoints, for a writer that commits on event loops.

At durability ``normal`` a commit writes the WAL and waits for no disk, so the writer may run a
batch on its callers' event loop thread (:attr:`~.base.Backend.commits_on_loop`). Two things
could still make that loop wait, and both are moved off it here:

- **The write lock.** ``BEGIN IMMEDIATE`` waits up to the busy timeout while another connection
  writes; a batch on a loop takes the lock without waiting (``busy_timeout`` 0) and, refused,
  goes to the writer's thread, which waits as usual.
- **Checkpoints.** SQLite checkpoints from the connection that commits, inside its ``COMMIT``,
  once the log passes ``wal_autocheckpoint`` pages, and a checkpoint syncs both files (3–4 ms
  here). The write connection turns that off; once it has changed :data:`CHECKPOINT_CHANGES`
  rows since the last checkpoint it owes, the writer's thread runs a ``PASSIVE`` checkpoint on a
  connection of its own while writes go on. Once the log holds :data:`RESTART_FRAMES` frames,
  one more runs with the store's writes held, so that the log is copied whole and the next write
  starts it again (copied only while writes go on, it would grow for ever). That step syncs
  both files while every writer of the store waits (~3 ms here), so it is not taken at every
  checkpoint: SQLite tells a connection neither its log's length nor when it passes a mark, and
  row changes stand in for pages (an append changes four rows and writes about fifteen pages).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from soong_store.backends.link import Link

CHECKPOINT_CHANGES = 256
"""Rows changed on the write connection between two checkpoints (~1,000 WAL pages of appends:
SQLite's own automatic interval)."""
RESTART_FRAMES = 4000
"""Frames in the log (~16 MB of 4 KiB pages) from which a checkpoint ends with writes held."""
_CHECKPOINTED_AT = "soong_store.checkpointed_at"
"""The driver connection's ``total_changes`` at its last checkpoint, kept in its pool record's
``info`` (present only where checkpoints are by hand)."""


def checkpoint_by_hand(cursor: Any, info: dict[str, Any]) -> None:
    """Turn a new write connection's automatic checkpoint off (``info``: its pool record's)."""
    cursor.execute("PRAGMA wal_autocheckpoint = 0")
    info[_CHECKPOINTED_AT] = cursor.connection.total_changes


def wait_for_locks(connection: Link, busy_timeout_ms: int) -> None:
    """Set how long taking a lock waits on ``connection`` (0: not at all)."""
    _driver(connection).execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")


def claim_checkpoint(connection: Connection) -> bool:
    """Whether ``connection`` has changed enough rows to owe a checkpoint (counted from now)."""
    last: int | None = connection.info.get(_CHECKPOINTED_AT)
    if last is None:  # SQLite checkpoints this connection itself
        return False
    changed: int = _driver(connection).total_changes
    if changed - last < CHECKPOINT_CHANGES:
        return False
    connection.info[_CHECKPOINTED_AT] = changed
    return True


def checkpoint(connection: Connection) -> bool:
    """A ``PASSIVE`` checkpoint: what no reader still needs is copied back; nobody waits.

    True when the log has grown to :data:`RESTART_FRAMES`: time to copy it whole.
    """
    row = _driver(connection).execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return row is not None and int(row[1]) >= RESTART_FRAMES


def _driver(connection: Link) -> Any:
    return connection.connection.driver_connection
