"""The backend seam without a database: the registry, SQLite's errors classified and translated."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from sqlalchemy.exc import DBAPIError, OperationalError

from soong_store.backends import base
from soong_store.backends.base import (
    Backend,
    Capabilities,
    backend_class,
    open_backend,
    shard_files,
    translate,
    translated,
)
from soong_store.backends.sqlite.backend import SQLiteBackend
from soong_store.backends.translation import ErrorKind
from soong_store.catalog.lookup import StoredTables
from soong_store.errors import InvalidArgument, NotFound, StorageError
from soong_store.schema.session_tables import table_owner


def driver_error(message: str, cls: type[Exception] = sqlite3.OperationalError) -> DBAPIError:
    """SQLAlchemy's wrapper of a driver error, as a statement would raise it."""
    return DBAPIError.instance("SELECT 1", (), cls(message), sqlite3.Error)


# -- the registry ---------------------------------------------------------------------------


def test_a_sqlite_url_gets_the_sqlite_backend_whatever_its_driver() -> None:
    for url in ("sqlite:///a.sqlite", "sqlite+pysqlite:///a.sqlite"):
        assert type(open_backend(url)) is SQLiteBackend


@pytest.mark.parametrize(
    "url", ["mysql+pymysql://user:secret@db.example/soong", "mssql://db.example/soong"]
)
def test_an_unregistered_dialect_is_refused_with_one_storage_error(url: str) -> None:
    name = url.split(":")[0].split("+")[0]
    with pytest.raises(StorageError, match=f"unsupported database backend '{name}'") as caught:
        open_backend(url)
    assert "runs on PostgreSQL, SQLite" in str(caught.value)
    assert "secret" not in str(caught.value)
    assert caught.value.backend == name


def test_a_store_on_an_unregistered_dialect_is_refused_before_anything_is_made(tmp_path) -> None:
    from soong_store import SessionStore

    home = tmp_path / "home"
    with pytest.raises(StorageError, match="unsupported database backend 'mysql'"):
        SessionStore(home=home, url="mysql://localhost/soong")
    assert not home.exists()


def test_a_malformed_url_is_invalid_input(tmp_path) -> None:
    from soong_store import SessionStore

    with pytest.raises(InvalidArgument, match="invalid database url 'not a url'"):
        open_backend("not a url")
    with pytest.raises(InvalidArgument, match="not a url"):
        SessionStore(home=tmp_path / "home", url="not a url")
    assert not (tmp_path / "home").exists()


class _Unfinished(Backend):
    """A backend that implements nothing of the contract (registered under no name)."""


def _refuse(*args: object) -> None:
    raise AssertionError("not called by these tests")


def test_a_backend_that_leaves_out_part_of_the_contract_cannot_be_made() -> None:
    with pytest.raises(TypeError, match="abstract method.*engine"):
        _Unfinished("sqlite:///a.sqlite")


def test_a_backend_class_registers_under_its_dialect_name(monkeypatch) -> None:
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))

    class FakeBackend(_Unfinished):
        name = "fakedb"
        title = "FakeDB"
        engine = database_exists = lock_session = lock_files = _refuse
        integrity = foreign_key_violations = _refuse

    assert backend_class("fakedb") is FakeBackend
    made = open_backend("fakedb://host/db", durability="full")
    assert isinstance(made, FakeBackend) and made.durability == "full"
    assert made.url.database == "db"


def test_only_a_backend_that_places_pairs_hands_out_shard_files() -> None:
    sqlite = open_backend("sqlite:///a.sqlite")
    assert sqlite.capabilities.places_pairs and shard_files(sqlite) is sqlite
    postgresql = open_backend("postgresql+psycopg://host/db")  # no connection is made
    assert not postgresql.capabilities.places_pairs and shard_files(postgresql) is None


def test_a_backend_that_places_pairs_without_shard_files_cannot_be_defined() -> None:
    with pytest.raises(TypeError, match="places pairs"):

        class _Placing(_Unfinished):
            capabilities = Capabilities(places_pairs=True)


def test_commits_on_loop_follow_the_capabilities_at_the_durability() -> None:
    assert SQLiteBackend("sqlite:///a.sqlite").commits_on_loop
    assert not SQLiteBackend("sqlite:///a.sqlite", durability="full").commits_on_loop
    assert not open_backend("postgresql+psycopg://host/db").commits_on_loop


def test_a_backend_refuses_an_unknown_durability() -> None:
    with pytest.raises(InvalidArgument, match="'sometimes'"):
        open_backend("sqlite:///a.sqlite", durability="sometimes")  # type: ignore[arg-type]


def test_an_in_memory_sqlite_database_is_refused() -> None:
    backend = open_backend("sqlite://")
    with pytest.raises(InvalidArgument, match="in-memory"):
        backend.database_exists()
    with pytest.raises(InvalidArgument, match="in-memory"):
        backend.engine("read")


# -- SQLite's messages, classified --------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("database is locked", ErrorKind.BUSY),
        ("database table is locked", ErrorKind.BUSY),
        ("database is busy", ErrorKind.BUSY),
        ("database or disk is full", ErrorKind.FULL),
        ("disk I/O error", ErrorKind.FULL),
        ("database disk image is malformed", ErrorKind.DAMAGED),
        ("file is not a database", ErrorKind.DAMAGED),
        ("no such table: nodes_sess_x", ErrorKind.MISSING_TABLE),
        ("UNIQUE constraint failed: sessions.session_id", None),
    ],
)
def test_each_sqlite_message_has_its_kind(message: str, kind: ErrorKind | None) -> None:
    assert SQLiteBackend.classify(driver_error(message)) is kind
    assert SQLiteBackend.classify(sqlite3.OperationalError(message)) is kind  # unwrapped too
    assert SQLiteBackend.is_busy(driver_error(message)) is (kind is ErrorKind.BUSY)
    assert SQLiteBackend.is_missing_table(driver_error(message)) is (
        kind is ErrorKind.MISSING_TABLE
    )


def test_a_changed_schema_is_busy_by_its_code_whatever_its_words() -> None:
    # Seen when a new reader connects search_fts while the writer moves a pair: SQLite gives
    # SQLITE_SCHEMA (17) in the words of the virtual table's constructor.
    error = sqlite3.OperationalError("vtable constructor failed: search_fts")
    error.sqlite_errorcode = 17
    assert SQLiteBackend.classify(DBAPIError.instance("SELECT 1", (), error, sqlite3.Error)) is (
        ErrorKind.BUSY
    )
    assert SQLiteBackend.is_transient(error)
    assert SQLiteBackend.classify(driver_error("database schema has changed")) is ErrorKind.BUSY
    other = sqlite3.OperationalError("vtable constructor failed: search_fts")
    other.sqlite_errorcode = 1  # SQLITE_ERROR: a failure that trying again does not mend
    assert SQLiteBackend.classify(other) is None


def test_the_store_s_own_errors_are_never_taken_for_a_driver_s() -> None:
    assert SQLiteBackend.classify(NotFound("no session 'database is locked'")) is None


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("database or disk is full", "storage failed: database or disk is full (the disk is full"),
        ("disk I/O error", "storage failed: disk I/O error (the disk is full or failing: nothing"),
        ("database disk image is malformed", "the database file is damaged: database disk"),
        ("file is not a database", "the database file is damaged: file is not a database"),
        ("database is locked", "database error: database is locked"),
        ("no such table: t", "database error: no such table: t"),
    ],
)
def test_each_sqlite_message_translates_to_a_storage_error_saying_what_it_means(
    message: str, said: str
) -> None:
    exc = driver_error(message)
    for error in (SQLiteBackend.translate(exc), translate(exc)):
        assert isinstance(error, StorageError)
        assert str(error).startswith(said)
        assert error.driver_error == "OperationalError"
        assert error.__cause__ is exc


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("database or disk is full", "storage failed: database or disk is full (the disk is full"),
        ("disk I/O error", "storage failed: disk I/O error (the disk is full or failing: nothing"),
        ("file is not a database", "the database file is damaged: file is not a database"),
        ("database is locked", "database error: database is locked"),
    ],
)
def test_a_driver_error_raised_outside_a_statement_translates_the_same(
    message: str, said: str
) -> None:
    """``ATTACH``, ``DETACH`` and pragmas run on the driver's connection: its errors, unwrapped."""
    exc = sqlite3.OperationalError(message)
    for error in (SQLiteBackend.translate(exc), translate(exc)):
        assert isinstance(error, StorageError)
        assert str(error).startswith(said)
        assert error.driver_error == "OperationalError"
        assert error.__cause__ is exc


def test_words_of_a_driver_in_another_error_are_not_taken_for_a_driver_error() -> None:
    assert str(translate(ValueError("malformed JSON"))) == "unexpected ValueError: malformed JSON"


def test_other_errors_translate_without_a_driver() -> None:
    assert str(translate(OSError(28, "No space left on device"))).startswith("storage failed: ")
    assert str(translate(KeyError("x"))) == "unexpected KeyError: 'x'"
    own = NotFound("no session 'a'")
    assert translate(own) is own


def test_translated_re_raises_every_error_as_a_store_error_from_the_original() -> None:
    exc = driver_error("database disk image is malformed")
    with pytest.raises(StorageError, match="damaged") as caught, SQLiteBackend.translated():
        raise exc
    assert caught.value.__cause__ is exc
    with pytest.raises(StorageError, match="unexpected ZeroDivisionError"), translated():
        _ = 1 / 0


@pytest.mark.parametrize("passing", [NotFound("no run 'r'"), asyncio.CancelledError()])
def test_translated_lets_store_errors_and_cancellation_through(passing: BaseException) -> None:
    with pytest.raises(type(passing)) as caught, translated():
        raise passing
    assert caught.value is passing


def test_sqlalchemy_s_operational_error_of_a_lock_is_busy() -> None:
    locked = sqlite3.OperationalError("database is locked")
    assert SQLiteBackend.is_busy(OperationalError("BEGIN IMMEDIATE", (), locked))


# -- the catalog's view of stored tables (pure) ---------------------------------------------


def test_a_table_s_owner_is_the_session_its_name_holds() -> None:
    assert table_owner("nodes_sess_a") == "sess_a"
    assert table_owner("events_Sess_B") == "Sess_B"
    assert table_owner("sessions") is None


def test_stored_tables_name_what_is_missing_and_what_is_orphaned() -> None:
    stored = StoredTables(["events_b", "nodes_a", "nodes_b", "nodes_c"], fold_case=False)
    assert stored.names == ("events_b", "nodes_a", "nodes_b", "nodes_c")
    assert stored.missing("a") == ["events_a"]
    assert stored.missing("b") == []
    assert stored.orphans(["a", "b"]) == ["nodes_c"]
    assert not stored.has("NODES_A")


def test_stored_tables_compare_names_as_a_case_folding_database_does() -> None:
    stored = StoredTables(["nodes_Sess_A", "events_sess_a"], fold_case=True)
    assert stored.has("NODES_sess_a")
    assert stored.missing("sess_a") == []
    assert stored.orphans(["SESS_A"]) == []
    assert stored.orphans(["other"]) == ["events_sess_a", "nodes_Sess_A"]
