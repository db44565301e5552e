"""A read connection on the driver alone: what a new process's first read runs on.

The hot reads (a session's row, its pair's placement, the climb of a path, the data version)
run their statements on the DB-API connection under SQLAlchemy's, so all they use of a
connection is its driver connection, its record's ``info`` and its dialect: :class:`Link`.
SQLAlchemy's :class:`~sqlalchemy.Connection` is one. :class:`DriverLink` is the other: a driver
connection a backend made and set up itself, with a dialect made without an engine. A store
that opens on its caller's loop reads first on one (:mod:`soong_store.store.runtime`): making the
read engine, its pool and the pool's first connection cost a new process about as much as its
first read (``docs/performance.md``). The engine is made when a read first needs it, and takes
the link's driver connection over as its first (:mod:`soong_store.read.readers`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError

from soong_store.backends.values import ReadOnAThread


class DriverRecord(Protocol):
    """What a link holds of its driver connection (a pool record's shape)."""

    @property
    def info(self) -> dict[Any, Any]:
        """What the store keeps about the driver connection, for as long as it lives."""

    @property
    def driver_connection(self) -> Any:
        """The DB-API connection."""


class Link(Protocol):
    """What the hot reads use of a read connection: its driver's connection and its dialect."""

    @property
    def dialect(self) -> Dialect:
        """The dialect its statements are written for."""

    @property
    def connection(self) -> DriverRecord:
        """Its driver connection, with the record the store keeps about it."""


class _Record:
    __slots__ = ("driver_connection", "info")

    def __init__(self, driver: Any) -> None:
        self.driver_connection = driver
        self.info: dict[Any, Any] = {}


class DriverLink:
    """A driver connection a backend set up, read on without an engine (see the module docstring).

    Its transactions are the driver's own ``BEGIN`` and ``commit()``/``rollback()``, as the
    read engine's are; driver errors come out as SQLAlchemy's classes, as they do from an
    engine's connection. Threading contract: used by one thread at a time (lent to it).
    """

    __slots__ = ("_closed", "connection", "dialect")

    def __init__(self, driver: Any, dialect: Dialect) -> None:
        self.connection = _Record(driver)
        self.dialect = dialect
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether it was closed (or invalidated): never used again."""
        return self._closed

    invalidated = closed

    @contextmanager
    def begin(self) -> Iterator[None]:
        """One read transaction: committed when the block ends, rolled back when it raises."""
        driver = self.connection.driver_connection
        with self._raised("BEGIN"):
            driver.execute("BEGIN")
        try:
            yield
        except BaseException:
            if driver.in_transaction:
                with self._raised("ROLLBACK"):
                    driver.rollback()
            raise
        with self._raised("COMMIT"):
            driver.commit()

    @contextmanager
    def _raised(self, statement: str) -> Iterator[None]:
        """Driver errors as SQLAlchemy's classes, as an engine's connection raises them."""
        error: type[Exception] = self.dialect.loaded_dbapi.Error
        try:
            yield
        except error as exc:
            raise DBAPIError.instance(statement, (), exc, error, dialect=self.dialect) from exc

    def close(self) -> None:
        """Close the driver connection (unless an engine took it over: :meth:`hand_over`)."""
        if not self._closed:
            self._closed = True
            self.connection.driver_connection.close()

    invalidate = close

    def hand_over(self) -> tuple[Any, dict[Any, Any]]:
        """The driver connection and its record's ``info``, for an engine to take over.

        The link is closed for its holder from now on; the driver connection lives on.
        """
        self._closed = True
        return self.connection.driver_connection, self.connection.info


def engine_connection(connection: Link, why: str) -> Connection:
    """``connection`` as an engine's, for a read no link runs (else a thread reads it: ``why``)."""
    if not isinstance(connection, Connection):
        raise ReadOnAThread(why)
    return connection
