"""The database backends the conformance suite runs on: one kind each, selected by marker.

A kind makes a fresh database for a test (``fresh``), a copy of one (``clone``), and says how to
reach it: the ``home`` and ``url`` a :class:`SessionStore` is opened with, and an engine that reads
and changes the database behind the store's back (``side_engine``). Damage made through that
engine must reach the tables as written, so it enforces no foreign keys. Everything that differs
between backends in the tests is here, so the tests themselves never name a dialect.

PostgreSQL plugs in as a second kind: ``fresh`` creates a database on the test server and drops it
after the test, ``clone`` makes one with ``CREATE DATABASE ... TEMPLATE``, ``side_engine`` sets
``session_replication_role = replica`` on its connections (no foreign-key triggers), and
``foreign_key_violations`` is empty (the server never lets one in). Then it joins ``KINDS`` and
``BACKENDS`` as ``pytest.param("postgresql", marks=pytest.mark.postgresql)``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
from sqlalchemy import Connection, Engine, create_engine, make_url
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from soong_store import SessionStore
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


class Kind(Protocol):
    """What the suite needs of a backend."""

    name: str

    def fresh(self, home: Path) -> AbstractContextManager[Backend]:
        """An empty database (no schema yet) for files under ``home``; dropped at exit."""

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


KINDS: dict[str, Kind] = {"sqlite": SQLiteKind()}
"""Every kind by its name, which is also the SQLAlchemy backend name of its URLs."""

BACKENDS = [pytest.param("sqlite", marks=pytest.mark.sqlite, id="sqlite")]
"""The parameters of the suite's ``backend_kind`` fixture, each with the marker CI selects by."""


def kind_of(url: str | URL) -> Kind:
    """The kind a database URL belongs to."""
    return KINDS[make_url(url).get_backend_name()]
