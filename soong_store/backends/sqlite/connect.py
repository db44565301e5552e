"""What a SQLite connection is given: pragmas, WAL, the driver's ``BEGIN``, lock wait, checkpoints.

:func:`install_hooks` sets an engine's connections up as their role needs (see
:mod:`.sqlite`): the busy timeout; for reads and writes, the durability's ``synchronous`` and
foreign keys; for writes, temporary data in memory; the switch to WAL, except for a read
connection made inside :func:`untouched` (the file keeps its journal mode until the revision it
holds is known); and ``BEGIN`` (reads) or ``BEGIN IMMEDIATE`` (writes, schema work) sent
straight to the driver.

Temporary data in memory (``temp_store = MEMORY``) because of the writer's savepoints: each job
of a batch runs in one, and SQLite keeps the pages a job changes, as they were, in a statement
journal, in memory up to 64 KiB and in a temporary file beyond. An append changes ~15 pages
(60 KiB), so with the default most jobs of a batch created, wrote and unlinked a file in the
temporary folder (``docs/performance.md`` has the counts). In memory, the journal is as large
as what one job changes. Reads keep the default: their sorts may be large.

A store that opens on its caller's loop reads first on a :func:`link`, a read connection set up
the same way on the driver alone; the read engine, made later, takes it over (:func:`take_over`).

A file this process may not write (it, or its folder) is opened for reading only
(:func:`soong_store.home.read_only_params`): no journal-mode switch, and a deferred ``BEGIN``
for schema reads too.

The write connection's lock wait and checkpoints serve a writer that commits on event loops. At
durability ``normal`` a commit writes the WAL and waits for no disk, so the writer may run a
batch on its callers' event loop thread
(:attr:`~soong_store.backends.base.Backend.commits_on_loop`). Two things could still make that
loop wait, and both are moved off it here:

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

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError

from soong_store.backends.base import Durability, Role
from soong_store.backends.link import DriverLink, Link
from soong_store.backends.retry import RetryPolicy
from soong_store.errors import StorageError
from soong_store.home import read_only_params

_UNTOUCHED: ContextVar[bool] = ContextVar("soong_store_sqlite_untouched", default=False)
"""Set while read connections made in this context must not switch the file to WAL."""
_TAKEN_OVER = "soong_store.taken_over"
"""In a pool record's ``info`` while its connection is a link's being taken over."""
_HANDED: WeakKeyDictionary[Engine, list[tuple[Any, dict[Any, Any]]]] = WeakKeyDictionary()
"""Per engine, the links handed over to it that its pool has not connected yet."""
READ_ONLY = "soong_store.read_only"
"""In a pool record's ``info`` when its connection reads a file it may not write."""


@contextmanager
def untouched() -> Iterator[None]:
    """Read connections made in the block (in this thread) keep the file's journal mode."""
    token = _UNTOUCHED.set(True)
    try:
        yield
    finally:
        _UNTOUCHED.reset(token)


def install_hooks(
    engine: Engine,
    role: Role,
    durability: Durability,
    retry: RetryPolicy,
    is_busy: Callable[[BaseException], bool],
    *,
    busy_timeout_ms: int,
    checkpoints_by_hand: bool = False,
    read_only: bool = False,
) -> None:
    """Set up each new connection of ``engine`` for ``role``, and its transactions' ``BEGIN``.

    ``read_only``: the engine reads a file it may not write (never the writer's).
    """
    pragmas = _pragmas(role, durability)
    begin = "BEGIN" if role == "read" or read_only else "BEGIN IMMEDIATE"

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            if read_only:
                record.info[READ_ONLY] = True
            if record.info.pop(_TAKEN_OVER, False):  # a link: set up already, in WAL
                return
            for pragma in pragmas:
                cursor.execute(pragma)
            if checkpoints_by_hand:
                checkpoint_by_hand(cursor, record.info)
            if read_only:
                return
            if role == "write" or (role == "read" and not _UNTOUCHED.get()):
                ensure_wal(cursor, retry, is_busy)
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        # Straight to the driver: a statement through SQLAlchemy costs several times SQLite's
        # own work for a BEGIN. Its error still reaches callers as SQLAlchemy's class.
        driver = connection.connection.driver_connection
        error: type[Exception] = connection.dialect.loaded_dbapi.Error
        try:
            driver.execute(begin)  # type: ignore[union-attr]
        except error as exc:
            raise DBAPIError.instance(begin, (), exc, error, dialect=connection.dialect) from exc


def _pragmas(role: Role, durability: Durability) -> list[str]:
    """A new connection's pragmas after its busy timeout (``synchronous`` reads the schema)."""
    # Deleted rows and freed pages are overwritten with zeros, in the main file and in every
    # shard attached later (ATTACH takes the main file's setting): what a deletion or a
    # redaction removed is in no free page afterwards, whatever the library's default.
    pragmas: list[str] = ["PRAGMA secure_delete = ON"]
    if role != "admin":
        pragmas += [
            f"PRAGMA synchronous = {'FULL' if durability == 'full' else 'NORMAL'}",
            "PRAGMA foreign_keys = ON",
        ]
    if role == "write":
        pragmas.append("PRAGMA temp_store = MEMORY")
    return pragmas


def link(
    dialect: Dialect, cargs: Any, cparams: Mapping[str, Any], durability: Durability
) -> DriverLink | None:
    """A read connection set up as the read engine's, but waiting for no lock, ever.

    ``cargs`` and ``cparams`` are the driver's, as the dialect makes them for an engine. Its
    busy timeout is 0 for its whole life: a link is read on event loops only, and an engine
    taking it over sets it up anew (:func:`take_over`). ``None``: the file is not in WAL yet
    (switching it waits; that is for an engine's connection).
    """
    driver = dialect.connect(*cargs, **cparams)
    try:
        driver.isolation_level = None
        cursor = driver.cursor()
        try:
            cursor.execute("PRAGMA busy_timeout = 0")
            for pragma in _pragmas("read", durability):
                cursor.execute(pragma)
            wal = in_wal(cursor)
        finally:
            cursor.close()
    except BaseException:
        driver.close()
        raise
    if not wal:
        driver.close()
        return None
    return DriverLink(driver, dialect)


def take_over(engine: Engine, taken: DriverLink) -> None:
    """Make ``taken``'s connection the first one ``engine``'s pool connects, its ``info`` kept.

    The link was set up as the engine's read connections are and is in WAL: the pool only turns
    its busy wait on, and runs no statement that could wait for a lock (the engine may be made
    on an event loop). ``engine`` connects through :func:`connect_naming`.
    """
    _HANDED[engine].append(taken.hand_over())


def connect_naming(engine: Engine, path: Path) -> None:
    """Connect ``engine``'s pool: a link handed over first (:func:`take_over`), else the driver.

    The driver's "unable to open database file" becomes a StorageError naming ``path`` and why.
    """
    handed: list[tuple[Any, dict[Any, Any]]] = []
    _HANDED[engine] = handed

    @event.listens_for(engine, "do_connect")
    def _connect(dialect: Dialect, record: Any, cargs: Any, cparams: Any) -> Any:
        if handed:
            driver, info = handed.pop()
            record.info.update(info)
            record.info[_TAKEN_OVER] = True
            return driver
        try:
            return dialect.connect(*cargs, **cparams)
        except dialect.loaded_dbapi.OperationalError as exc:
            if "unable to open" not in str(exc).lower():
                raise
            if path.is_dir():
                why = "it is a folder; give the path of a file"
            elif not path.parent.is_dir():
                why = f"its folder {path.parent} does not exist; create it first"
            else:
                why = f"{exc}; check that this user may read it and its folder"
            raise StorageError(f"cannot open the database {path}: {why}", path=str(path)) from exc


def ensure_wal(cursor: Any, retry: RetryPolicy, is_busy: Callable[[BaseException], bool]) -> None:
    """Switch the file to WAL once (the mode is persistent), waiting out other processes.

    Changing the journal mode needs the file to itself; SQLite answers "database is locked" at
    once, without calling the busy handler, while another process holds a lock, so this retries
    under the store's policy.
    """
    attempts = retry.start()
    while True:
        try:
            if in_wal(cursor):
                return
            if cursor.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal":
                return
        except Exception as exc:
            if not is_busy(exc) or attempts.expired:
                raise
        else:
            if attempts.expired:
                raise StorageError("could not switch the database to WAL mode")
        attempts.wait()


def in_wal(cursor: Any) -> bool:
    """Whether the file is in WAL mode already (asking changes nothing)."""
    return bool(cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal")


def read_only_uri(path: Path) -> str:
    """A URI (for ``ATTACH``) that opens ``path`` for reading only (:func:`read_only_params`)."""
    params = "&".join(f"{key}={value}" for key, value in read_only_params(path).items())
    return f"{path.absolute().as_uri()}?{params}"


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
