"""What the PostgreSQL backend decides without a server: its URL, and what each error means."""

from __future__ import annotations

import psycopg
import psycopg.errors
import pytest
from sqlalchemy.exc import DBAPIError

from soong_store import StorageError
from soong_store.backends.base import open_backend, translate
from soong_store.backends.postgresql.backend import PostgreSQLBackend
from soong_store.backends.translation import ErrorKind


def wrapped(error: Exception) -> DBAPIError:
    return DBAPIError.instance("SELECT 1", {}, error, psycopg.Error)


def test_a_bare_postgresql_url_runs_on_psycopg_3() -> None:
    backend = open_backend("postgresql://alice@db.example.org/agents")
    assert isinstance(backend, PostgreSQLBackend)
    assert backend.url.drivername == "postgresql+psycopg"


def test_another_driver_is_refused_by_name() -> None:
    with pytest.raises(StorageError, match="unsupported PostgreSQL driver 'psycopg2'"):
        open_backend("postgresql+psycopg2://alice@db.example.org/agents")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (psycopg.errors.SerializationFailure("could not serialize access"), ErrorKind.BUSY),
        (psycopg.errors.DeadlockDetected("deadlock detected"), ErrorKind.BUSY),
        (psycopg.errors.LockNotAvailable("could not obtain lock"), ErrorKind.BUSY),
        (psycopg.errors.AdminShutdown("terminating connection"), ErrorKind.LOST),
        (psycopg.OperationalError("connection refused\n\tIs the server running"), ErrorKind.LOST),
        (psycopg.errors.DiskFull("could not extend file"), ErrorKind.FULL),
        (
            psycopg.errors.UndefinedTable('relation "nodes_x" does not exist'),
            ErrorKind.MISSING_TABLE,
        ),
        (psycopg.errors.UniqueViolation("duplicate key"), None),
    ],
)
def test_errors_are_classified_by_sqlstate_or_by_libpq_words(
    error: Exception, kind: ErrorKind | None
) -> None:
    assert PostgreSQLBackend.classify(wrapped(error)) is kind
    assert PostgreSQLBackend.is_transient(wrapped(error)) is (
        kind in (ErrorKind.BUSY, ErrorKind.LOST)
    )


def test_a_lost_connection_says_the_database_could_not_be_reached() -> None:
    error = translate(wrapped(psycopg.errors.AdminShutdown("terminating connection")))
    assert isinstance(error, StorageError)
    assert str(error).startswith("the database could not be reached: terminating connection")
