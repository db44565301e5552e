"""The SQLite backend: its SQLite-only statements, settings and messages (here and beside it).

Three kinds of engine share one database file:

- ``write``: the writer's single connection. Transactions start with ``BEGIN IMMEDIATE`` so that
  the write lock is taken up front (a deferred transaction that upgrades to a writer later can
  fail with ``SQLITE_BUSY`` without the busy handler ever being called). That lock is the
  database's, so the per-session lock is a no-op here.
- ``read``: a small pool for readers; ``BEGIN`` (deferred) gives each read a consistent WAL
  snapshot across its statements and never blocks the writer. A store opens on the pool's first
  connection: made inside :meth:`SQLiteBackend.connecting_untouched`, it leaves the journal mode
  alone until the revision it reads is known to be this code's head, so a database the store
  refuses is not switched to WAL. A database at head and in WAL already opens instead on a
  :meth:`SQLiteBackend.link`, a read connection on the driver alone that the pool takes over
  as its first once a read needs the engine (:mod:`soong_store.backends.link`).
- ``admin``: schema work, also under ``BEGIN IMMEDIATE``. No journal-mode change and no
  foreign-key enforcement, so that a database this code refuses is left untouched and Alembic's
  batch mode can rebuild tables (hence :meth:`SQLiteBackend.foreign_key_violations` afterwards).

pysqlite's own transaction handling is switched off (``isolation_level = None``) and the store
issues ``BEGIN`` itself; that is also what lets ``PRAGMA journal_mode=WAL`` work on every driver
(old pysqlite3 builds refuse it inside their implicit transaction). SQLite's busy handler waits
``BUSY_TIMEOUT_MS`` for a lock; past that, the store's retry policy tries the work again.
What each new connection is given, and the write connection's lock wait and checkpoints, are
:mod:`.connect`; shard files :mod:`.files`.
"""

from __future__ import annotations

import importlib
import itertools
import os
import re
import sqlite3  # the default driver, loaded with the backend rather than in a store's open
from contextlib import AbstractContextManager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
)
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from soong_store.backends.base import Backend, Capabilities, Durability, Role, ShardFiles
from soong_store.backends.link import DriverLink, Link
from soong_store.backends.retry import RetryPolicy
from soong_store.backends.sqlite import connect as sqlite_connect
from soong_store.backends.sqlite import files as sqlite_files
from soong_store.backends.sqlite import shards as migrate_shards
from soong_store.backends.translation import ErrorKind
from soong_store.backends.values import DataVersion, Integrity
from soong_store.errors import InvalidArgument, SoongStoreError, StorageError
from soong_store.home import DATABASE_FILE, SQLITE_MODULE_ENV, read_only_params, writable

STATEMENT_CACHE_SIZE = 16
"""Each engine's compiled-statement cache (SQLAlchemy's default is 500). Reads over one session's
tables are entries of their own, ~2 MB per 10, so a large cache fills with sessions read once;
the statements shared by every session stay in it."""

if TYPE_CHECKING:
    from soong_store.backends.search import Searcher

MIN_SQLITE_VERSION = (3, 35, 0)
"""Oldest SQLite library the store runs on (RETURNING and DROP COLUMN arrived in 3.35)."""

BUSY_TIMEOUT_MS = 5_000
READ_POOL_SIZE = 4

_PATTERNS: tuple[tuple[ErrorKind, tuple[str, ...]], ...] = (
    (
        ErrorKind.BUSY,
        ("database is locked", "database is busy", "table is locked", "schema has changed"),
    ),
    (ErrorKind.FULL, ("disk is full", "disk i/o error")),
    (ErrorKind.DAMAGED, ("malformed", "not a database")),
    (ErrorKind.MISSING_TABLE, ("no such table",)),
)
"""SQLite's messages (lowercased) by what they mean; the first kind that matches wins."""

_UNABLE = re.compile(r"unable to validate the inverted index for FTS5 table \S+: (?P<why>.*)")
"""FTS5's line in ``quick_check`` when it could not read its index (its reason after the colon)."""

_SQLITE_SCHEMA = 17
"""The primary result code of a statement prepared against a schema another connection changed.

Its words vary: a virtual table connected while the schema changes says only ``vtable
constructor failed``. Tried again, the statement is prepared against the new schema.
"""

_VERSIONS = ("PRAGMA data_version", "PRAGMA schema_version")
_SOURCE = "soong_store.data_version_source"
_SOURCES = itertools.count(1)
"""Numbers each DB-API connection once (kept in its pool record's ``info``, which lives as long)."""


def database_url(home: Path) -> URL:
    """The URL of the default database file inside a home folder."""
    return URL.create("sqlite+pysqlite", database=str(home / DATABASE_FILE))


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


def sqlite_version(module: ModuleType | None) -> tuple[int, ...]:
    """The version of the SQLite library a DB-API module links."""
    if module is None:
        return sqlite3.sqlite_version_info
    info: tuple[int, ...] = module.sqlite_version_info
    return info


_NODES_CHANGED = (
    "CREATE TABLE soong_store_nodes_changed (x)",
    "DROP TABLE soong_store_nodes_changed",
)
"""Statements that move the main file's ``schema_version`` and leave nothing behind."""


class SQLiteBackend(Backend, ShardFiles):
    """SQLite in WAL mode, through the standard library's driver or another DB-API module."""

    name = "sqlite"
    title = "SQLite"
    capabilities = Capabilities(
        fold_case=True,
        read_connections=READ_POOL_SIZE,
        reads_on_loop=True,
        loop_commits=frozenset({"normal"}),  # at "full" a commit waits for the disk
        alters_by_rebuild=True,
        opens_on_reader=True,
        opens_on_loop=True,
        places_pairs=True,
        names_parameters=True,
        orders_text_by_bytes=True,
    )

    def __init__(
        self,
        url: str | URL,
        *,
        durability: Durability = "normal",
        module: str | ModuleType | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        loaded = load_sqlite_module(module)
        super().__init__(url, durability=durability, module=loaded, retry=retry)
        self._module = loaded

    def engine(self, role: Role) -> Engine:
        """An engine for one role (see the module docstring), after checking the SQLite build."""
        version = sqlite_version(self._module)
        if version < MIN_SQLITE_VERSION:
            need = ".".join(map(str, MIN_SQLITE_VERSION))
            have = ".".join(map(str, version))
            raise StorageError(
                f"SQLite {have} is too old: soong_store needs SQLite {need} or newer"
            )
        url, read_only = self._connect_url(role)
        kwargs = self._engine_kwargs()
        if role == "read":
            kwargs.update(pool_size=READ_POOL_SIZE, max_overflow=0)
        elif role == "write":  # a second for the checkpoints of a writer committing on loops
            kwargs.update(pool_size=2 if self.commits_on_loop else 1, max_overflow=0)
        else:
            kwargs["poolclass"] = NullPool
        engine = create_engine(url, **kwargs)
        sqlite_connect.connect_naming(engine, self._file())
        by_hand = role == "write" and self.commits_on_loop  # the writer's thread checkpoints
        self._install_hooks(engine, role, checkpoints_by_hand=by_hand, read_only=read_only)
        return engine

    def check_writable(self) -> None:
        """Refuse, naming the file, a database this process may not write (or create)."""
        self._connect_url("write")

    def _connect_url(self, role: Role) -> tuple[URL, bool]:
        """The URL an engine of ``role`` connects with, and whether it reads only.

        A file this process may not write (it, or its folder) is read as it is
        (:func:`soong_store.home.read_only_params`) and refuses a writer; one that is not
        there cannot be made in a folder that is there but may not be written.
        """
        path = self._file()
        if writable(path) or not path.parent.is_dir():
            return self.url, False  # a missing folder is the home's to make (or fail to)
        if not path.exists():
            raise StorageError(
                f"cannot create the database {path}: this user may not write {path.parent}; "
                "give a home it may write, or create the database there as one who may",
                path=str(path),
            )
        if role == "write":
            raise StorageError(
                f"cannot write {path}: this user may not write it or its folder, so it was "
                "opened for reading only; to write, open it as a user who may write both",
                path=str(path),
            )
        query = {k: v for k, v in self.url.query.items() if k not in ("mode", "immutable")}
        query.update(read_only_params(path), uri="true")
        return URL.create(self.url.drivername, database=path.absolute().as_uri(), query=query), True

    def link(self) -> DriverLink | None:
        """The first read connection of an open on the caller's loop (:mod:`.sqlite_connect`).

        ``None`` for too old a SQLite build or a file not in WAL yet: the open on a thread
        reports the one and switches the other. The dialect is made as an engine makes it.
        """
        if sqlite_version(self._module) < MIN_SQLITE_VERSION:
            return None
        url, _read_only = self._connect_url("read")
        made: Any = url.get_dialect()
        dialect: Dialect = made(dbapi=self._module or made.import_dbapi())
        cargs, cparams = dialect.create_connect_args(url)
        cparams.update(self._engine_kwargs()["connect_args"])
        return sqlite_connect.link(dialect, cargs, cparams, self.durability)

    def engine_taking(self, link: DriverLink) -> Engine:
        """A read engine whose pool's first connection is ``link``'s (:mod:`.sqlite_connect`)."""
        try:
            engine = self.engine("read")
        except BaseException:
            link.close()
            raise
        sqlite_connect.take_over(engine, link)
        return engine

    def _install_hooks(
        self,
        engine: Engine,
        role: Role,
        *,
        checkpoints_by_hand: bool = False,
        read_only: bool = False,
    ) -> None:
        """Each new connection's setup (:mod:`.sqlite_connect`), at today's busy timeout."""
        sqlite_connect.install_hooks(
            engine,
            role,
            self.durability,
            self.retry,
            self.is_busy,
            busy_timeout_ms=BUSY_TIMEOUT_MS,
            checkpoints_by_hand=checkpoints_by_hand,
            read_only=read_only,
        )

    def _engine_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "connect_args": {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
            "query_cache_size": STATEMENT_CACHE_SIZE,
        }
        if self._module is not None:
            kwargs["module"] = self._module
        return kwargs

    def file_engine(self, file: str, main_as: str) -> Engine:
        """An engine on a shard file beside the database (see :mod:`.sqlite_files`)."""

        def install(engine: Engine) -> None:
            self._install_hooks(engine, "read")

        return sqlite_files.file_engine(self._file(), file, main_as, self._engine_kwargs(), install)

    def files_on_disk(self) -> list[str]:
        """The shard files in the database's folder, leftovers too (:mod:`.sqlite_files`)."""
        return sqlite_files.files_on_disk(self._file().parent, leftovers=True)

    def remove_file(self, file: str) -> None:
        """Remove a shard file and SQLite's files of it (:mod:`.sqlite_files`)."""
        sqlite_files.remove_file(self._file(), file)

    def marked_at(self, revision: str) -> bool:
        """Whether the shards' mark rules out a shard past ``revision`` (cheap: no shard read)."""
        return migrate_shards.marked_at(self._file().parent, revision)

    def refuse_ahead(self, revision: str) -> None:
        """Refuse a shard file past ``revision`` (:mod:`soong_store.backends.sqlite.shards`)."""
        migrate_shards.refuse_shards_ahead(self._file().parent, revision, self._module)

    @classmethod
    def linked_files(cls, connection: Connection) -> list[str]:
        """The links where shard files live, the shard folder included (:mod:`.sqlite_files`)."""
        return sqlite_files.shard_links(sqlite_files.folder(connection))

    # The shard part's and the checkpoints' functions themselves, not methods that forward to
    # them: several run on every write.
    attached_as = staticmethod(sqlite_files.attached_as)
    attached_files = staticmethod(sqlite_files.attached_files)
    attach = staticmethod(sqlite_files.attach)
    detach = staticmethod(sqlite_files.detach)

    def _file(self) -> Path:
        """The database file the URL names (an in-memory database is refused)."""
        database = self.url.database
        if database is None or database in ("", ":memory:"):
            raise InvalidArgument("an in-memory SQLite database cannot be shared: give a file URL")
        if self.url.query.get("uri") and database.startswith("file:"):
            return Path(unquote(urlsplit(database).path))
        return Path(database)

    def database_exists(self) -> bool:
        """Whether the database file is there."""
        return self._file().exists()

    def connecting_untouched(self) -> AbstractContextManager[None]:
        """Read connections made in the block (in this thread) keep the file's journal mode.

        Switching to WAL rewrites the file's header: it waits until the revision is known.
        """
        return sqlite_connect.untouched()

    def settle_reader(self, engine: Engine) -> None:
        """Switch the file to WAL on a read connection, if it is not in WAL yet (and writable)."""
        if engine.url.query.get("mode") == "ro":  # read as it is
            return
        with self.translated():
            raw = engine.raw_connection()
            try:
                cursor = raw.cursor()
                try:
                    sqlite_connect.ensure_wal(cursor, self.retry, self.is_busy)
                finally:
                    cursor.close()
            finally:
                raw.close()

    @property
    def location(self) -> str:
        """The database file."""
        return str(self._file())

    @classmethod
    def classify(cls, exc: BaseException) -> ErrorKind | None:
        """By the result code where it says enough (a changed schema), else by SQLite's words."""
        if isinstance(exc, SoongStoreError):
            return None
        driver_error = exc.orig if isinstance(exc, DBAPIError) else exc
        code = getattr(driver_error, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF == _SQLITE_SCHEMA:
            return ErrorKind.BUSY
        text = str(driver_error).lower()
        for kind, patterns in _PATTERNS:
            if any(pattern in text for pattern in patterns):
                return kind
        return None

    @classmethod
    def data_version(cls, connection: Link) -> DataVersion:
        """``PRAGMA data_version``, then ``schema_version``, of the main file.

        Both are header values: reading the first starts the transaction's WAL snapshot, so
        they describe what the rest of the transaction reads. ``data_version`` is per
        connection, hence ``source``. Two pragmas, not one ``SELECT`` of both as table-valued
        functions: SQLite prepares that ~5x slower (~65 µs in a new process) and runs it slower.
        """
        record = connection.connection
        source = record.info.get(_SOURCE)
        if source is None:
            source = record.info[_SOURCE] = next(_SOURCES)
        cursor = record.driver_connection.cursor()
        dialect = connection.dialect
        error: type[Exception] = dialect.loaded_dbapi.Error
        values = []
        for pragma in _VERSIONS:
            try:
                values.append(cursor.execute(pragma).fetchone()[0])
            except error as exc:
                raise DBAPIError.instance(pragma, (), exc, error, dialect=dialect) from exc
        return DataVersion(source=source, data=values[0], schema=values[1])

    @classmethod
    def lock_files(cls, connection: Connection) -> None:
        """Nothing to take: the database's write lock already covers the artifact files."""

    @classmethod
    def wait_for_locks(cls, connection: Link, wait: bool) -> None:
        """``busy_timeout``: the store's wait, or none (:mod:`.connect`)."""
        sqlite_connect.wait_for_locks(connection, BUSY_TIMEOUT_MS if wait else 0)

    claim_checkpoint = staticmethod(sqlite_connect.claim_checkpoint)
    checkpoint = staticmethod(sqlite_connect.checkpoint)

    @classmethod
    def nodes_changed(cls, connection: Connection) -> None:
        """Move ``schema_version`` (a table made and dropped): every path cache lets go.

        The path cache keeps nodes as never changing and drops a session's entry when the
        schema version moved (:mod:`soong_store.read.path_cache`), in every process; a
        redaction, as rare as a deletion (which drops tables), pays the same re-read.
        """
        for statement in _NODES_CHANGED:
            connection.exec_driver_sql(statement)

    def truncate_log(self, connection: Connection) -> None:
        """``PRAGMA wal_checkpoint(TRUNCATE)``: of the main file and of every shard attached.

        Called at close, after an erasure, once the store's other connections are closed: the
        log is copied back and cut to zero bytes, so the pages it held before the erasure are
        in no file. A reader of another process may keep the log from being cut (SQLite waits
        the busy timeout for it); the log is then cut by whichever checkpoint comes next.
        """
        driver: Any = connection.connection.driver_connection
        driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    @classmethod
    def driver_in_transaction(cls, connection: Connection) -> bool:
        """The driver's ``in_transaction`` (SQLite rolls back by itself on a full disk, for one)."""
        raw = connection.connection.dbapi_connection
        return bool(getattr(raw, "in_transaction", True))

    @classmethod
    def integrity(cls, connection: Connection) -> Integrity:
        """``PRAGMA quick_check``'s lines other than ``ok``.

        From SQLite 3.44 the check asks FTS5 to validate its index too, and SQLite 3.44 does
        so in a way that fails with "database is locked" whenever another connection is
        writing. Such a line says that FTS5 could not look, not that anything is damaged: it
        becomes a note. The whole-home check validates the index in the writer, where no
        other writer is (FTS5's ``integrity-check``, :mod:`soong_store.check.search_index`).
        """
        lines = [str(row[0]) for row in connection.exec_driver_sql("PRAGMA quick_check")]
        problems, notes = [], []
        for line in lines:
            if line == "ok":
                continue
            unable = _UNABLE.match(line)
            if unable is not None and cls.classify(Exception(unable["why"])) is ErrorKind.BUSY:
                notes.append(f"quick_check: {line} (another connection was writing; not damage)")
            else:
                problems.append(line)
        return Integrity(problems, notes)

    @classmethod
    def foreign_key_violations(cls, connection: Connection) -> list[tuple[Any, ...]]:
        """``PRAGMA foreign_key_check``'s rows."""
        return [tuple(row) for row in connection.exec_driver_sql("PRAGMA foreign_key_check")]

    @classmethod
    def searcher(cls) -> Searcher:
        """FTS5 over the global ``search_text`` table (:mod:`.search`)."""
        from soong_store.backends.sqlite.search import FTS5

        return FTS5

    @classmethod
    def add_column(cls, connection: Connection, tables: set[str], definition: str) -> None:
        """By rewriting the tables' ``CREATE TABLE`` texts (:mod:`.sqlite_alter`)."""
        from soong_store.backends.sqlite.alter import rewrite_add_column

        rewrite_add_column(connection, tables, definition)


def make_engine(
    url: str | URL,
    role: Role,
    *,
    durability: Durability = "normal",
    sqlite_module: str | ModuleType | None = None,
    retry: RetryPolicy | None = None,
) -> Engine:
    """An engine of one role on a SQLite URL (a shortcut for tests and tools)."""
    return SQLiteBackend(url, durability=durability, module=sqlite_module, retry=retry).engine(role)
