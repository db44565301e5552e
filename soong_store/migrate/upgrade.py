"""Schema migrations: Alembic glue, the open-time upgrade, and the per-session table helper.

Revisions live in the top-level ``migrations/`` folder, shipped in the wheel as the package
``soong_store._migrations``. Every Alembic call here runs on a live connection of the backend's
admin engine, passed through ``config.attributes["connection"]``, inside one transaction that
takes the write lock as it begins: several processes opening an old database at once upgrade it
exactly once (the others wait for the lock, under the store's retry policy, then find it at
head), and a failed upgrade leaves the database as it was. The revision is first read without
any transaction of the store's own, so a database already at head is opened (and asked for its
revision) without waiting behind another process's write.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Literal, cast

from sqlalchemy import Connection, Engine, select
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from soong_store.backends.base import Backend, backend_class_of, open_backend, shard_files
from soong_store.backends.link import Link
from soong_store.backends.retry import RetryPolicy
from soong_store.backends.sqlite.shards import marked_at, refuse_shards_ahead, write_mark
from soong_store.catalog.lookup import paired_session_ids, table_names
from soong_store.errors import SchemaVersionError, StorageError
from soong_store.home import HEAD_REVISION
from soong_store.migrate.pairs import MIGRATION_LOGGER, PairChange, add_column, upgrade_pairs
from soong_store.model.checks import check_session_id
from soong_store.schema.revisions import alembic_config, script_location
from soong_store.schema.session_tables import events_table_name, nodes_table_name
from soong_store.schema.tables import sessions_table

__all__ = [
    "HEAD_REVISION",
    "PairChange",
    "add_column",
    "alembic_config",
    "current_revision",
    "ensure_schema",
    "head_revision",
    "script_location",
    "session_ids",
    "session_table_names",
    "upgrade",
    "upgrade_pairs",
]

_ALEMBIC_LOCK = threading.Lock()  # Alembic keeps module-level state (alembic.context, alembic.op).


def head_revision() -> str:
    """The newest revision this code knows, as Alembic finds it in ``migrations/``."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the migrations folder has no revision"
    return head


def upgrade(
    url_or_engine: str | URL | Engine,
    revision: str = "head",
    *,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Upgrade a database to ``revision`` (default: the newest), creating it if it is empty.

    Also builds the search index a database lacks when a library without FTS5 upgraded it.
    ``progress`` is given each line the revisions log (a revision run, a shard of a
    per-session change done), as they happen.

    Raises:
        SchemaVersionError: the database is at a revision this code does not know, or holds
            tables that are not soong_store's; nothing is changed.
    """
    from soong_store.backends.sqlite.search import index_missing

    with _admin(url_or_engine) as (engine, retry):
        at_head = revision == "head" and _stored_revision(engine) == HEAD_REVISION
        if at_head and not index_missing(engine):
            return
        with _reporting(progress):
            _upgrade_locked(engine, revision, retry)


def current_revision(url_or_engine: str | URL | Engine) -> str | None:
    """The revision a database is at (``None`` for an empty or missing database).

    Asking never creates a database file and never waits for another process's write.
    """
    if not isinstance(url_or_engine, Engine) and not open_backend(url_or_engine).database_exists():
        return None
    with _admin(url_or_engine) as (engine, _retry), backend_class_of(engine).translated():
        rows = _read_revisions(engine)
    if not rows:
        return None
    if len(rows) > 1:
        raise SchemaVersionError(
            f"the database records several schema revisions ({', '.join(sorted(rows))}): "
            "soong_store keeps exactly one"
        )
    return rows[0]


def ensure_schema(engine: Engine, retry: RetryPolicy) -> None:
    """Bring a database to head when a store opens; refuse one this code does not know."""
    if _stored_revision(engine) != HEAD_REVISION:
        _upgrade_locked(engine, "head", retry)


_REVISION_QUERY = "SELECT version_num FROM alembic_version"


def _read_revisions(engine: Engine) -> list[str] | None:
    """The rows of ``alembic_version`` (``None`` when there is no such table).

    The query runs on the driver connection outside any transaction the store would begin (the
    admin engine's begins by taking the write lock), so it waits for no writer: it reads the last
    commit even while another connection writes.
    """
    raw = engine.raw_connection()
    error: type[Exception] = engine.dialect.loaded_dbapi.Error
    try:
        cursor = raw.cursor()
        try:
            cursor.execute(_REVISION_QUERY)
            return [str(version) for (version,) in cursor.fetchall()]
        finally:
            cursor.close()
    except error as exc:
        if backend_class_of(engine).is_missing_table(exc):
            return None
        raise DBAPIError.instance(_REVISION_QUERY, (), exc, error, dialect=engine.dialect) from exc
    finally:
        raw.close()


def link_at_head(link: Link) -> bool:
    """Whether the database ``link`` reads records exactly one revision, head.

    Outside any transaction, as :func:`_read_revisions`; an error answers no (an open that asks
    then runs where the error is reported).
    """
    driver = link.connection.driver_connection
    try:
        rows = driver.execute(_REVISION_QUERY).fetchall()
    except link.dialect.loaded_dbapi.Error:
        return False
    return [tuple(row) for row in rows] == [(HEAD_REVISION,)]


def shards_marked_at_head(backend: Backend) -> bool:
    """Whether no shard file can be past head, known without reading one (the open on a loop)."""
    files = shard_files(backend)
    return files is None or files.marked_at(HEAD_REVISION)


def refuse_shards_past_head(backend: Backend) -> None:
    """Refuse a home with a shard file past head: code at head cannot read its pairs.

    Raises:
        SchemaVersionError: a shard is at a revision this code does not know; it names it.
    """
    files = shard_files(backend)
    if files is not None:
        files.refuse_ahead(HEAD_REVISION)


def _stored_revision(engine: Engine) -> str | None:
    """The revision recorded in the database, read without Alembic (``None``: not known here).

    A database found at head needs nothing; anything else (empty, older, unknown, unreadable)
    takes the locked path, which also reports errors properly.
    """
    try:
        rows = _read_revisions(engine)
    except SQLAlchemyError:
        return None
    return rows[0] if rows is not None and len(rows) == 1 else None


def session_ids(connection: Connection) -> list[str]:
    """Every session id in the database, validated (they become table names)."""
    column = sessions_table.c.session_id
    rows = connection.execute(select(column).order_by(column)).scalars()
    return [check_session_id(sid) for sid in rows]


def session_table_names(connection: Connection, kind: Literal["nodes", "events"]) -> list[str]:
    """The names of the ``nodes_*`` or ``events_*`` tables of the pairs in the main database.

    Sessions never written have no pair yet (the factory will build the newest shape for them).
    On SQLite the pairs of idle sessions live in shard files, which this does not list: a
    revision that changes every session's tables calls :func:`upgrade_pairs` instead.
    """
    if kind not in ("nodes", "events"):
        raise ValueError(f"kind must be 'nodes' or 'events', not {kind!r}")
    name = nodes_table_name if kind == "nodes" else events_table_name
    return [name(sid) for sid in paired_session_ids(connection)]


class _Lines(logging.Handler):
    """Alembic's log lines of what it runs (its two lines about the dialect left out)."""

    _SETUP = ("Context impl ", "Will assume ")

    def __init__(self, progress: Callable[[str], None]) -> None:
        super().__init__(logging.INFO)
        self._progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if not line.startswith(self._SETUP):
            self._progress(line)


@contextmanager
def _reporting(progress: Callable[[str], None] | None) -> Iterator[None]:
    """Hand Alembic's migration log lines to ``progress`` for the block (nothing if ``None``)."""
    if progress is None:
        yield
        return
    logger = logging.getLogger(MIGRATION_LOGGER)
    handler, level = _Lines(progress), logger.level
    logger.addHandler(handler)
    if not logger.isEnabledFor(logging.INFO):
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@contextmanager
def _admin(url_or_engine: str | URL | Engine) -> Iterator[tuple[Engine, RetryPolicy]]:
    """An admin engine (the caller's, or one made and disposed of here) and the retry policy."""
    if isinstance(url_or_engine, Engine):
        yield url_or_engine, RetryPolicy()
        return
    backend = open_backend(url_or_engine)
    engine = backend.engine("admin")
    try:
        yield engine, backend.retry
    finally:
        engine.dispose()


def _upgrade_locked(engine: Engine, revision: str, retry: RetryPolicy) -> None:
    dialect = backend_class_of(engine)

    def attempt() -> None:
        with _ALEMBIC_LOCK, engine.connect() as connection, connection.begin():
            _upgrade_in_transaction(connection, revision, dialect)

    with dialect.translated():  # a damaged file, or not a database at all
        retry.run(attempt, dialect.is_transient)


def _settle_mark(connection: Connection, dialect: type[Backend]) -> None:
    """Set the shards' mark to the revision this upgrade commits, once no shard is past it.

    In the upgrade's transaction (its write lock held, so no shard changes meanwhile): a crash
    before the commit leaves the mark ahead of the database, and the next open reads the shards.
    """
    from alembic.runtime.migration import MigrationContext

    if not dialect.capabilities.places_pairs:
        return
    from soong_store.backends.sqlite import files as sqlite_files

    folder = sqlite_files.folder(connection)
    reached = MigrationContext.configure(connection).get_current_revision()
    if reached is None or marked_at(folder, reached):
        return
    refuse_shards_ahead(folder, reached, cast(ModuleType, connection.dialect.loaded_dbapi))
    write_mark(folder, reached)


def _upgrade_in_transaction(connection: Connection, revision: str, dialect: type[Backend]) -> None:
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from alembic.util.exc import CommandError

    from soong_store.backends.sqlite.search import build_missing_index

    config = alembic_config(connection)
    script = ScriptDirectory.from_config(config)
    current = MigrationContext.configure(connection).get_current_revision()
    if current is None:
        foreign = [name for name in table_names(connection) if name != "alembic_version"]
        if foreign:
            shown = ", ".join(sorted(foreign)[:5])
            raise SchemaVersionError(
                f"the database holds tables that are not soong_store's ({shown}): "
                "refusing to touch it"
            )
    else:
        try:
            script.get_revision(current)
        except CommandError as exc:
            raise SchemaVersionError(
                f"the database is at schema revision {current!r}, which this version of "
                f"soong_store does not know (newer code wrote it?); head here is "
                f"{script.get_current_head()!r}",
                revision=current,
            ) from exc
        if revision == "head" and current == script.get_current_head():
            build_missing_index(connection)
            return
    try:
        command.upgrade(config, revision)
    except CommandError as exc:
        raise SchemaVersionError(f"cannot upgrade to {revision!r}: {exc}") from exc
    _settle_mark(connection, dialect)
    build_missing_index(connection)
    violations = dialect.foreign_key_violations(connection)
    if violations:
        raise StorageError(f"upgrade left foreign-key violations: {violations[:5]}")
