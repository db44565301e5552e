"""Engines and dialect specifics: every SQLite-only statement of the store lives here.

Three kinds of engine share one database:

- ``write``: the writer's single connection. Transactions start with ``BEGIN IMMEDIATE`` so that
  the write lock is taken up front (a deferred transaction that upgrades to a writer later can
  fail with ``SQLITE_BUSY`` without the busy handler ever being called).
- ``read``: a small pool for readers; ``BEGIN`` (deferred) gives each read a consistent WAL
  snapshot across its statements and never blocks the writer.
- ``admin``: schema work. No journal-mode change and no foreign-key enforcement, so that a
  database this code refuses is left untouched and Alembic's batch mode can rebuild tables.

pysqlite's own transaction handling is switched off (``isolation_level = None``) and the store
issues ``BEGIN`` itself; that is also what lets ``PRAGMA journal_mode=WAL`` work on every driver
(old pysqlite3 builds refuse it inside their implicit transaction).
"""

from __future__ import annotations

import importlib
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from sqlalchemy import Connection, Engine, create_engine, event, make_url
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from soong_store.errors import InvalidArgument, StorageError

Role = Literal["write", "read", "admin"]
Durability = Literal["normal", "full"]

MIN_SQLITE_VERSION = (3, 35, 0)
"""Oldest SQLite library the store runs on (RETURNING and DROP COLUMN arrived in 3.35)."""

SQLITE_MODULE_ENV = "SOONG_STORE_SQLITE_MODULE"
BUSY_TIMEOUT_MS = 5_000
_WAL_WAIT_S = 30.0
READ_POOL_SIZE = 4


def database_url(home: Path) -> URL:
    """The URL of the default database file inside a home folder."""
    return URL.create("sqlite+pysqlite", database=str(home / "sessions.sqlite"))


def load_sqlite_module(name_or_module: str | ModuleType | None) -> ModuleType | None:
    """Resolve ``sqlite_module=``: an importable DB-API module name, a module, or ``None``.

    ``None`` means ``$SOONG_STORE_SQLITE_MODULE`` when that is set (so that a whole program, or a
    test run, can be pointed at another SQLite build), else the standard library's ``sqlite3``.
    """
    if name_or_module is None:
        name_or_module = os.environ.get(SQLITE_MODULE_ENV) or None
    if name_or_module is None or isinstance(name_or_module, ModuleType):
        return name_or_module
    try:
        return importlib.import_module(name_or_module)
    except ImportError as exc:
        raise InvalidArgument(
            f"cannot import sqlite module {name_or_module!r}: {exc}", sqlite_module=name_or_module
        ) from exc


def is_sqlite(url: str | URL) -> bool:
    """Whether a URL names a SQLite database."""
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_version(module: ModuleType | None) -> tuple[int, ...]:
    """The version of the SQLite library a DB-API module links."""
    if module is None:
        import sqlite3

        return sqlite3.sqlite_version_info
    info: tuple[int, ...] = module.sqlite_version_info
    return info


def make_engine(
    url: str | URL,
    role: Role,
    *,
    durability: Durability = "normal",
    sqlite_module: str | ModuleType | None = None,
) -> Engine:
    """Create an engine for one role, with the pragmas and transaction style that role needs."""
    url = make_url(url)
    module = load_sqlite_module(sqlite_module)
    if url.get_backend_name() != "sqlite":
        raise StorageError(
            f"unsupported database backend {url.get_backend_name()!r}: this version runs on SQLite",
            url=url.render_as_string(hide_password=True),
        )
    if durability not in ("normal", "full"):
        raise InvalidArgument(
            f"invalid durability {durability!r}: expected 'normal' or 'full'",
            durability=durability,
        )
    version = sqlite_version(module)
    if version < MIN_SQLITE_VERSION:
        need = ".".join(map(str, MIN_SQLITE_VERSION))
        have = ".".join(map(str, version))
        raise StorageError(f"SQLite {have} is too old: soong_store needs SQLite {need} or newer")
    if url.database in (None, "", ":memory:"):
        raise InvalidArgument("an in-memory SQLite database cannot be shared: give a file URL")
    kwargs: dict[str, Any] = {
        "connect_args": {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
    }
    if module is not None:
        kwargs["module"] = module
    if role == "read":
        kwargs.update(pool_size=READ_POOL_SIZE, max_overflow=0)
    elif role == "write":
        kwargs.update(pool_size=1, max_overflow=0)
    else:
        kwargs["poolclass"] = NullPool
    engine = create_engine(url, **kwargs)
    _install_sqlite_hooks(engine, role, durability)
    return engine


def _install_sqlite_hooks(engine: Engine, role: Role, durability: Durability) -> None:
    pragmas = [f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}"]
    if role != "admin":
        pragmas += [
            f"PRAGMA synchronous = {'FULL' if durability == 'full' else 'NORMAL'}",
            "PRAGMA foreign_keys = ON",
        ]
    begin = "BEGIN" if role == "read" else "BEGIN IMMEDIATE"

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            for pragma in pragmas:
                cursor.execute(pragma)
            if role != "admin":
                _ensure_wal(cursor)
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


def _ensure_wal(cursor: Any) -> None:
    """Switch the file to WAL once (the mode is persistent), waiting out other processes.

    Changing the journal mode needs the file to itself; SQLite answers "database is locked" at
    once, without calling the busy handler, while another process holds a lock, so this retries.
    """
    deadline = time.monotonic() + _WAL_WAIT_S
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                return
            if cursor.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal":
                return
        except Exception as exc:
            if not is_busy(exc) or time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise StorageError("could not switch the database to WAL mode")
        time.sleep(0.01)


def is_busy(exc: BaseException) -> bool:
    """Whether a driver error means "another connection holds the lock: try again"."""
    text = str(getattr(exc, "orig", exc)).lower()
    return any(m in text for m in ("database is locked", "database is busy", "table is locked"))


def foreign_key_violations(connection: Connection) -> list[tuple[Any, ...]]:
    """Rows that break a foreign key (schema work runs with enforcement off, so it checks)."""
    return [tuple(row) for row in connection.exec_driver_sql("PRAGMA foreign_key_check")]
