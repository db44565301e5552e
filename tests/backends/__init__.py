"""The database backends the conformance suite runs on: one kind each, selected by marker.

A kind makes a fresh database for a test (``fresh``), a copy of one (``clone``), and says how to
reach it: the ``home`` and ``url`` a :class:`SessionStore` is opened with, and an engine that reads
and changes the database behind the store's back (``side_engine``). Damage made through that
engine must reach the tables as written, so it enforces no foreign keys. Everything that differs
between backends in the tests is here, so the tests themselves never name a dialect.

PostgreSQL is the second kind: ``fresh`` copies the run's template database on the test server
(:func:`tests.postgres_server.template_database`: the ``amcheck`` extension, so that ``check``
runs the server's own verification, and the schema at head, as a store's first open leaves it)
and drops it after the test, ``empty`` a new database with nothing in it, ``clone`` makes one
with ``CREATE DATABASE ... TEMPLATE``, ``side_engine`` sets ``session_replication_role =
replica`` on its connections (no foreign-key triggers, so damage lands as written), and
``foreign_key_violations`` looks for rows whose references point nowhere (only such damage can
make one). Its server is the run's ``pg_url``, handed over by the suite's ``backend_kind``
fixture (:meth:`PostgreSQLKind.use`), so the kind is skipped with one reason where no server can
be had.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
from sqlalchemy import (
    Connection,
    Engine,
    and_,
    column,
    create_engine,
    event,
    inspect,
    make_url,
    select,
    table,
)
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from soong_store import SessionStore
from tests import postgres_server
from tests.conftest import RAW_SQLITE


@dataclass(frozen=True)
class Backend:
    """One database for one test, and the home its artifact files live in."""

    name: str
    home: Path
    url: str

    def store(self, **options: Any) -> SessionStore:
        """A store (not yet open) on this database; ``options`` are the other constructor args."""
        return SessionStore(home=self.home, url=self.url, **options)

    @property
    def args(self) -> dict[str, Any]:
        """The constructor arguments that place a store on this database."""
        return {"home": self.home, "url": self.url}

    @property
    def cli(self) -> list[str]:
        """The options that point the ``soong-store`` command at this database."""
        return ["--home", str(self.home), "--url", self.url]


SEARCH_FOLDS_DIACRITICS = {"sqlite": True, "postgresql": False}
"""Whether a search for ``cafe`` or ``CAFÉ`` finds ``Café``: SQLite's FTS5 tokenizer folds case
and diacritics of every letter; PostgreSQL's ``simple`` configuration folds case as the
database's ``LC_CTYPE`` says (ASCII only under the test server's C locale) and keeps diacritics
(``unaccent`` is an extension the store does not install)."""


class Kind(Protocol):
    """What the suite needs of a backend."""

    name: str

    def fresh(self, home: Path) -> AbstractContextManager[Backend]:
        """A new database with nothing stored, for files under ``home``; dropped at exit.

        Where no store opened it yet: SQLite's has no file, PostgreSQL's the schema at head.
        """

    def empty(self, home: Path) -> AbstractContextManager[Backend]:
        """A database with no schema at all (what ``upgrade`` starts from); dropped at exit."""

    def clone(self, source: Backend, home: Path) -> AbstractContextManager[Backend]:
        """A copy of ``source`` (no store open on it) and of its home's files; dropped at exit."""

    def side_engine(self, url: str | URL) -> Engine:
        """An engine on ``url`` that bypasses the store, enforces no foreign keys, pools nothing."""

    def foreign_key_violations(self, connection: Connection) -> list[tuple[Any, ...]]:
        """The rows whose references point nowhere (empty where the database forbids them)."""


class SQLiteKind:
    """SQLite: ``sessions.sqlite`` in the home, where a store without ``url=`` puts it."""

    name = "sqlite"

    def _backend(self, home: Path) -> Backend:
        return Backend(self.name, home, f"sqlite+pysqlite:///{home / 'sessions.sqlite'}")

    @contextmanager
    def fresh(self, home: Path) -> Iterator[Backend]:
        yield self._backend(home)  # the file goes with the test's temporary folder

    def empty(self, home: Path) -> AbstractContextManager[Backend]:
        return self.fresh(home)  # no file yet: no schema

    @contextmanager
    def clone(self, source: Backend, home: Path) -> Iterator[Backend]:
        shutil.copytree(source.home, home)  # the database file (and any -wal) with the files
        yield self._backend(home)

    def side_engine(self, url: str | URL) -> Engine:
        # The store's own SQLite library: a second one in this process would not see the store's
        # POSIX locks, and closing it could release them or delete the live -wal file.
        return create_engine(
            url, module=RAW_SQLITE, poolclass=NullPool, connect_args={"timeout": 30}
        )

    def foreign_key_violations(self, connection: Connection) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in connection.exec_driver_sql("PRAGMA foreign_key_check")]


class PostgreSQLKind:
    """PostgreSQL: a database of its own per test on the run's server; files in the home."""

    name = "postgresql"

    def __init__(self) -> None:
        self.server: str | None = None

    def use(self, server_url: str) -> PostgreSQLKind:
        """Make databases on the server of ``server_url`` (the run's ``pg_url``)."""
        self.server = server_url
        return self

    def _server(self) -> str:
        assert self.server is not None, "the postgresql kind is handed its server by a fixture"
        return self.server

    @contextmanager
    def fresh(self, home: Path) -> Iterator[Backend]:
        server = self._server()
        template = postgres_server.template_database(server)
        with postgres_server.fresh_database(server, template=template) as url:
            yield Backend(self.name, home, url)

    @contextmanager
    def empty(self, home: Path) -> Iterator[Backend]:
        with postgres_server.fresh_database(self._server()) as url:
            yield Backend(self.name, home, url)

    @contextmanager
    def clone(self, source: Backend, home: Path) -> Iterator[Backend]:
        name = f"soong_clone_{secrets.token_hex(6)}"
        template = make_url(source.url).database
        admin = create_engine(
            postgres_server.database_url(self._server()),
            isolation_level="AUTOCOMMIT",
            poolclass=NullPool,
        )
        try:
            with admin.connect() as connection:
                connection.exec_driver_sql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            shutil.copytree(source.home, home)
            try:
                yield Backend(self.name, home, postgres_server.database_url(source.url, name))
            finally:
                with admin.connect() as connection:
                    connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            admin.dispose()

    def side_engine(self, url: str | URL) -> Engine:
        engine = create_engine(url, poolclass=NullPool)

        @event.listens_for(engine, "connect")
        def _no_triggers(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.autocommit = True
            dbapi_connection.execute("SET session_replication_role = replica")
            dbapi_connection.autocommit = False

        return engine

    def foreign_key_violations(self, connection: Connection) -> list[tuple[Any, ...]]:
        found = inspect(connection)
        violations: list[tuple[Any, ...]] = []
        for name in sorted(found.get_table_names()):
            for fk in found.get_foreign_keys(name):
                pairs = list(zip(fk["constrained_columns"], fk["referred_columns"], strict=True))
                child = table(name, *(column(local) for local, _ in pairs))
                parent = table(
                    fk["referred_table"], *(column(remote) for _, remote in pairs)
                ).alias("referred")
                query = (
                    select(*(child.c[local] for local, _ in pairs))
                    .select_from(
                        child.outerjoin(
                            parent, and_(*(child.c[a] == parent.c[b] for a, b in pairs))
                        )
                    )
                    .where(
                        and_(*(child.c[a].is_not(None) for a, _ in pairs)),
                        parent.c[pairs[0][1]].is_(None),
                    )
                )
                violations += [
                    (name, fk["referred_table"], *row) for row in connection.execute(query)
                ]
        return violations


KINDS: dict[str, Kind] = {"sqlite": SQLiteKind(), "postgresql": PostgreSQLKind()}
"""Every kind by its name, which is also the SQLAlchemy backend name of its URLs."""

BACKENDS = [
    pytest.param("sqlite", marks=pytest.mark.sqlite, id="sqlite"),
    pytest.param("postgresql", marks=pytest.mark.postgresql, id="postgresql"),
]
"""The parameters of the suite's ``backend_kind`` fixture, each with the marker CI selects by."""


def kind_of(url: str | URL) -> Kind:
    """The kind a database URL belongs to."""
    return KINDS[make_url(url).get_backend_name()]
