"""The PostgreSQL backend (psycopg 3): every PostgreSQL-only statement, setting and code lives here.

Three kinds of engine share one database, as on SQLite:

- ``write``: the writer's single connection, ``READ COMMITTED``. Nothing database-wide is locked:
  each job takes its session's lock first (:meth:`PostgreSQLBackend.lock_session`), so writers
  to different sessions never wait for each other, on any host.
- ``read``: a small pool; each read is one ``REPEATABLE READ READ ONLY`` transaction, so all its
  statements see one snapshot and it never waits for a writer.
- ``admin``: schema work. Its transactions begin by taking an advisory lock of the schema, so
  that several processes opening an old database upgrade it once (the others wait, then find it
  at head); PostgreSQL's DDL is transactional, so a refused or failed upgrade changes nothing.

The per-session lock is the session's own row, ``FOR NO KEY UPDATE``: exact per session, and it
serialises with archiving and deleting (which take the same lock) while foreign-key checks of
other rows (``KEY SHARE``) pass it. Where no row exists yet (creating a session, importing one)
an advisory transaction lock keyed by a 64-bit hash of the id stands in. Only the first lock of a
transaction waits; a later one (a group-commit batch reaching a second session) is tried without
waiting and, if taken, reported busy, so two writers can never wait for each other in a cycle.

Errors are classified by SQLSTATE (and, for a connection that fails before the server answers,
by libpq's words): serialization failures, deadlocks and a lock not available are busy; a
connection refused, cut or shut down is lost; both are tried again under the store's retry
policy. A ``COMMIT`` whose answer was lost is resolved by the transaction's id
(:meth:`PostgreSQLBackend.commit_outcome`), never by running the work twice.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from soong_store.backends.base import Backend, Capabilities, Durability, Role
from soong_store.backends.retry import RetryPolicy
from soong_store.backends.translation import ErrorKind
from soong_store.backends.values import Integrity
from soong_store.errors import SoongStoreError, StorageError
from soong_store.schema.tables import with_postgresql_options

if TYPE_CHECKING:
    from soong_store.backends.search import Searcher

READ_POOL_SIZE = 4
CONNECT_TIMEOUT_S = 10
APPLICATION_NAME = "soong_store"
SCHEMA_LOCK_KEY = "soong_store.schema"
FILES_LOCK_KEY = "soong_store.artifact-files"
_SESSION_KEY = "soong_store.session:"
_HELD = "soong_store.locked_in"
"""``Connection.info`` key: the transaction that already holds one of the store's locks."""

_KINDS: dict[str, ErrorKind] = {
    "40001": ErrorKind.BUSY,  # serialization_failure
    "40P01": ErrorKind.BUSY,  # deadlock_detected
    "55P03": ErrorKind.BUSY,  # lock_not_available (NOWAIT)
    "53100": ErrorKind.FULL,  # disk_full
    "58030": ErrorKind.FULL,  # io_error
    "XX001": ErrorKind.DAMAGED,  # data_corrupted
    "XX002": ErrorKind.DAMAGED,  # index_corrupted
    "42P01": ErrorKind.MISSING_TABLE,  # undefined_table
    "57P01": ErrorKind.LOST,  # admin_shutdown
    "57P02": ErrorKind.LOST,  # crash_shutdown
    "57P03": ErrorKind.LOST,  # cannot_connect_now
}
_LOST_WORDS = (
    "connection refused",
    "server closed the connection",
    "terminating connection",
    "the database system is",  # starting up, shutting down, in recovery mode
    "could not receive data",
    "could not send data",
    "consuming input failed",
    "sending query failed",
    "connection is lost",
    "the connection is closed",
    "is the server running",
    "timeout expired",
    "connection timed out",
    "connection reset",
    "broken pipe",
    "too many clients",
    "ssl syscall error",
)
"""libpq's and psycopg's words (lowercased) for a connection that failed without a SQLSTATE."""

_ROW_LOCK = "SELECT 1 FROM sessions WHERE session_id = %(sid)s FOR NO KEY UPDATE"
_KEY_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))"
_KEY_TRY = "SELECT pg_try_advisory_xact_lock(hashtextextended(%(key)s, 0))"
_ANY_TABLE = "SELECT 1 FROM pg_tables WHERE schemaname = current_schema() LIMIT 1"
_XID = "SELECT pg_current_xact_id_if_assigned()::text"
_XID_STATUS = "SELECT pg_xact_status(%(xid)s::xid8)"
_NO_DATABASE = "3D000"
"""invalid_catalog_name: the server has no database of the URL's name."""
_XID_IN_FUTURE = "22023"
"""invalid_parameter_value: what ``pg_xact_status`` raises for an id beyond the next one."""


def _psycopg_error(exc: BaseException) -> BaseException | None:
    """The psycopg error behind ``exc`` (``None`` when it is not one)."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    if orig is not None and type(orig).__module__.split(".")[0] == "psycopg":
        return orig
    return None


class PostgreSQLBackend(Backend):
    """PostgreSQL 13 or newer through psycopg 3 (the ``postgres`` extra)."""

    name = "postgresql"
    title = "PostgreSQL"
    capabilities = Capabilities(read_connections=READ_POOL_SIZE, opens_on_reader=True)

    def __init__(
        self,
        url: str | URL,
        *,
        durability: Durability = "normal",
        module: str | ModuleType | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(url, durability=durability, module=None, retry=retry)
        with_postgresql_options()
        driver = self.url.get_driver_name()
        if self.url.drivername == "postgresql":
            self.url = self.url.set(drivername="postgresql+psycopg")
        elif driver != "psycopg":
            raise StorageError(
                f"unsupported PostgreSQL driver {driver!r}: soong_store runs on psycopg 3 "
                "(postgresql+psycopg://...)",
                backend=self.name,
            )

    def engine(self, role: Role) -> Engine:
        """An engine for one role (see the module docstring)."""
        if importlib.util.find_spec("psycopg") is None:
            raise StorageError(
                "PostgreSQL needs psycopg 3: pip install 'soong-store[postgres]'",
                backend=self.name,
            )
        connect_args: dict[str, Any] = {}
        if "connect_timeout" not in self.url.query:
            connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
        if "application_name" not in self.url.query:
            connect_args["application_name"] = APPLICATION_NAME
        # No hstore column anywhere: the dialect need not look its type up on every new engine.
        kwargs: dict[str, Any] = {"connect_args": connect_args, "use_native_hstore": False}
        if role == "read":
            kwargs.update(pool_size=READ_POOL_SIZE, max_overflow=0)
        elif role == "write":
            kwargs.update(pool_size=1, max_overflow=0)
        else:
            kwargs["poolclass"] = NullPool
        engine = create_engine(self.url, **kwargs)
        _fold_first_connect(engine.dialect)
        _install_hooks(engine, role, self.durability)
        return engine

    def database_exists(self) -> bool:
        """Whether the server has the database with any table in it (asking creates nothing).

        An empty database is the server's, not yet a store's: as with a missing SQLite file,
        only ``upgrade``, ``import`` and ``demo`` put a schema in it.
        """
        return self._tables_present() is True

    def absence(self, where: str) -> str:
        """The server lacks the database (create it), or the database has no tables (upgrade)."""
        if self._tables_present() is None:
            return (
                f'no database in {where}: the server has no database "{self.url.database}"; '
                "create it, then run `soong-store --url URL upgrade`"
            )
        return (
            f"no soong_store schema in {where}: the database has no tables; run "
            "`soong-store --url URL upgrade` to create the schema"
        )

    def _tables_present(self) -> bool | None:
        """Whether the database has any table in its schema; ``None``: no such database."""
        engine = self.engine("admin")
        try:
            with engine.connect() as connection:
                return _run(connection, _ANY_TABLE, {}) is not None
        except DBAPIError as exc:
            if getattr(_psycopg_error(exc), "sqlstate", None) == _NO_DATABASE:
                return None
            text = str(exc.orig)
            if 'database "' in text and '" does not exist' in text:
                return None
            raise self.translate(exc) from exc
        finally:
            engine.dispose()

    @classmethod
    def classify(cls, exc: BaseException) -> ErrorKind | None:
        """By SQLSTATE; a connection that failed without one, by libpq's words."""
        if isinstance(exc, SoongStoreError):
            return None
        if isinstance(exc, DBAPIError) and exc.connection_invalidated:
            return ErrorKind.LOST
        orig = _psycopg_error(exc)
        if orig is None:
            return None
        state: str | None = getattr(orig, "sqlstate", None)
        if state is not None:
            return _KINDS.get(state, ErrorKind.LOST if state.startswith("08") else None)
        text = str(orig).lower()
        if any(words in text for words in _LOST_WORDS):
            return ErrorKind.LOST
        return None

    @classmethod
    def lock_session(cls, connection: Connection, session_id: str) -> bool:
        """Lock the session's row; with no row yet, its id's advisory lock (see the module doc).

        Returns whether the row exists. After waiting for an id's advisory lock, the row is
        locked too if its creator committed meanwhile.
        """
        wait = _first_lock(connection)
        row_lock = _ROW_LOCK if wait else _ROW_LOCK + " NOWAIT"
        if _run(connection, row_lock, {"sid": session_id}) is not None:
            return True
        _key_lock(connection, _SESSION_KEY + session_id.lower(), wait=wait)
        return _run(connection, row_lock, {"sid": session_id}) is not None

    @classmethod
    def lock_files(cls, connection: Connection) -> None:
        """An advisory transaction lock of the whole artifact folder."""
        _key_lock(connection, FILES_LOCK_KEY, wait=_first_lock(connection))

    @classmethod
    def commit_token(cls, connection: Connection) -> str | None:
        """The transaction's id, if it has one (it has once it wrote anything)."""
        row = _run(connection, _XID, {})
        return None if row is None or row[0] is None else str(row[0])

    @classmethod
    def commit_outcome(cls, connection: Connection, token: str) -> bool | None:
        """``pg_xact_status``: committed, aborted, or (still in progress, unknown) ``None``.

        An id the server calls "in the future" never reached its log (a crash lost it with the
        rest of the transaction), so the transaction did not commit. The question runs under a
        savepoint, so that answer leaves the asking transaction usable.
        """
        _run(connection, "SAVEPOINT soong_store_xact_status", {})
        try:
            row = _run(connection, _XID_STATUS, {"xid": token})
        except DBAPIError as exc:
            if getattr(_psycopg_error(exc), "sqlstate", None) != _XID_IN_FUTURE:
                raise
            _run(connection, "ROLLBACK TO SAVEPOINT soong_store_xact_status", {})
            return False
        status = None if row is None else row[0]
        if status == "committed":
            return True
        if status == "aborted":
            return False
        return None

    @classmethod
    def driver_in_transaction(cls, connection: Connection) -> bool:
        """Whether psycopg's connection is inside a transaction (or in an unknown state)."""
        raw = connection.connection.dbapi_connection
        info = getattr(raw, "info", None)
        return info is None or int(info.transaction_status) != 0  # 0: IDLE

    @classmethod
    def integrity(cls, connection: Connection) -> Integrity:
        """``amcheck`` over every table and B-tree index of the schema, where it is installed.

        Checking never installs anything (that would change the database), so without the
        extension the notes say what was not verified.
        """
        from soong_store.backends.postgresql import check as _pg_check

        return _pg_check.amcheck(connection)

    @classmethod
    def foreign_key_violations(cls, connection: Connection) -> list[tuple[Any, ...]]:
        """None: PostgreSQL checks every foreign key itself, also during schema work."""
        return []

    @classmethod
    def searcher(cls) -> Searcher:
        """``tsvector`` matching, a GIN index on ``search_text`` (:mod:`.search`)."""
        from soong_store.backends.postgresql.search import POSTGRES

        return POSTGRES


def _first_lock(connection: Connection) -> bool:
    """Whether this transaction takes its first lock of the store's now (only that one waits)."""
    transaction = connection.get_transaction()
    first = transaction is None or connection.info.get(_HELD) is not transaction
    connection.info[_HELD] = transaction
    return first


def _key_lock(connection: Connection, key: str, *, wait: bool) -> None:
    if wait:
        _run(connection, _KEY_LOCK, {"key": key})
        return
    row = _run(connection, _KEY_TRY, {"key": key})
    if row is None or not row[0]:
        import psycopg.errors

        busy = psycopg.errors.LockNotAvailable(f"the lock {key!r} is held by another transaction")
        raise DBAPIError.instance(
            _KEY_TRY, {"key": key}, busy, psycopg.Error, dialect=connection.dialect
        )


def _run(connection: Connection, sql: str, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """One statement on the driver's cursor (the writer's hot path); its first row, if any.

    Driver errors come out as SQLAlchemy's classes, as those of every other statement do.
    """
    raw = connection.connection.dbapi_connection
    assert raw is not None
    error: type[Exception] = connection.dialect.loaded_dbapi.Error
    cursor = raw.cursor()
    try:
        cursor.execute(sql, params)
        row = cursor.fetchone() if cursor.description is not None else None
    except error as exc:
        raise DBAPIError.instance(sql, params, exc, error, dialect=connection.dialect) from exc
    finally:
        cursor.close()
    return None if row is None else tuple(row)


_SCHEMA_AND_ISOLATION = "SELECT current_schema(), current_setting('transaction_isolation')"


def _fold_first_connect(dialect: Any) -> None:
    """Let an engine's first connection ask the server one question, not four.

    SQLAlchemy's dialect starts by querying the server's version, the current schema, the
    isolation level and how strings are quoted, on every new engine (a store has up to three).
    psycopg already holds the version and the quoting from the server's startup messages; the
    schema and the isolation level come in one query. A new process's first read waits for this.
    """
    isolation: list[str] = []  # found with the schema, handed over to the next call

    def server_version(connection: Connection) -> tuple[int, ...]:
        number = int(_driver_info(connection).server_version)
        return (number // 10000, number % 10000)  # 10 and newer: major * 10000 + minor

    def default_schema(connection: Connection) -> str:
        row = _run(connection, _SCHEMA_AND_ISOLATION, {})
        assert row is not None
        isolation[:] = [str(row[1]).upper()]
        return str(row[0])

    def default_isolation(dbapi_connection: Any) -> str:
        if isolation:
            return isolation.pop()
        return str(type(dialect).get_default_isolation_level(dialect, dbapi_connection))

    def backslash_escapes(connection: Connection) -> None:
        quoting = _driver_info(connection).parameter_status("standard_conforming_strings")
        if quoting is None:
            type(dialect)._set_backslash_escapes(dialect, connection)
        else:
            dialect._backslash_escapes = quoting == "off"

    dialect._get_server_version_info = server_version
    dialect._get_default_schema_name = default_schema
    dialect.get_default_isolation_level = default_isolation
    dialect._set_backslash_escapes = backslash_escapes


def _driver_info(connection: Connection) -> Any:
    """The driver's ``ConnectionInfo`` of a connection (what the server said at start-up)."""
    return getattr(connection.connection.dbapi_connection, "info", None)


def _install_hooks(engine: Engine, role: Role, durability: Durability) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        if role == "read":
            import psycopg

            dbapi_connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            dbapi_connection.read_only = True
        elif role == "write" and durability == "full":
            # Whatever the server's default: COMMIT returns once the WAL is flushed to disk.
            dbapi_connection.autocommit = True
            dbapi_connection.execute("SET synchronous_commit = on")
            dbapi_connection.autocommit = False

    if role == "admin":

        @event.listens_for(engine, "begin")
        def _on_begin(connection: Connection) -> None:
            # Straight to the driver, inside the transaction psycopg opens for it: schema work
            # of several processes runs one after another, each seeing the last one's commit.
            _run(connection, _KEY_LOCK, {"key": SCHEMA_LOCK_KEY})
