"""Shared fixtures: a store on a real database file in a temporary home; a PostgreSQL server.

No test reaches the real home of whoever runs the suite: ``$HOME`` is a temporary folder for the
whole run and another for each test, and ``$SOONG_AGENT_HOME`` is unset, so a store or command
opened without a home (``~/.soong-agent``) and every subprocess a test starts (they inherit the
environment) land there. A run that creates ``~/.soong-agent`` in the real home fails anyway.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.backends import default_url
from soong_store.backends.base import open_backend
from soong_store.backends.link import DriverLink
from soong_store.backends.sqlite.backend import load_sqlite_module, sqlite_version
from tests import postgres_server
from tests.raw_snapshot import raw_snapshot

pytest_plugins = ["tests.backends.fixtures"]

LIBRARY_FOLDERS = (
    "backends",
    "schema",
    "catalog",
    "migrate",
    "search",
    "read",
    "write",
    "store",
    "check",
)
"""The folders of ``tests`` whose layers execute SQL: on SQLite their tests' results can depend on
the SQLite library, so each carries the ``sqlite_library`` marker (pyproject.toml says the rule)."""
NOT_LIBRARY_FOLDERS = ("backends/postgresql",)

REAL_HOME = Path.home()
"""The home of whoever runs the suite, as it was before any fixture replaced ``$HOME``."""
_REAL_AGENT_HOME = REAL_HOME / ".soong-agent"
_AGENT_HOME_BEFORE = _REAL_AGENT_HOME.exists()


def _own_home(monkeypatch: pytest.MonkeyPatch, home: Path) -> Path:
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SOONG_AGENT_HOME", raising=False)
    return home


@pytest.fixture(scope="session", autouse=True)
def _run_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``$HOME`` for the session- and module-scoped fixtures, set up before any test's."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield _own_home(monkeypatch, tmp_path_factory.mktemp("run-home"))


@pytest.fixture(autouse=True)
def user_home(
    _run_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The test's own ``$HOME`` (not under ``tmp_path``, which tests compare whole)."""
    return _own_home(monkeypatch, tmp_path_factory.mktemp("user-home"))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run if it created ``~/.soong-agent`` in the real home (a fixture was bypassed)."""
    if not _AGENT_HOME_BEFORE and _REAL_AGENT_HOME.exists():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", f"the test run created {_REAL_AGENT_HOME}", red=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``sqlite_library`` every test of a library folder that does not run on PostgreSQL.

    First of the hooks, so that ``-m`` selects by the mark.
    """
    tests = Path(__file__).parent
    for item in items:
        if not item.path.is_relative_to(tests):
            continue
        folder = item.path.parent.relative_to(tests).as_posix()
        inside = any(folder == f or folder.startswith(f"{f}/") for f in LIBRARY_FOLDERS)
        outside = any(folder == f or folder.startswith(f"{f}/") for f in NOT_LIBRARY_FOLDERS)
        if inside and not outside and item.get_closest_marker("postgresql") is None:
            item.add_marker(pytest.mark.sqlite_library)


def pytest_report_header(config: pytest.Config) -> str:
    module = load_sqlite_module(None)
    name = module.__name__ if module is not None else "sqlite3 (standard library)"
    version = ".".join(map(str, sqlite_version(module)))
    return f"soong_store SQLite driver: {name}, SQLite {version}"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
async def store(home: Path) -> AsyncIterator[SessionStore]:
    async with SessionStore(home=home) as opened:
        yield opened


def db_path(home: Path) -> Path:
    return home / "sessions.sqlite"


RAW_SQLITE: Any = load_sqlite_module(None) or sqlite3
"""The DB-API module the store uses: raw connections, and the errors they raise, come from it."""


class LoopTicker:
    """Counts the wake-ups of a 10 ms sleeper on the running loop inside the block: a loop that
    something blocked counts none meanwhile."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task: asyncio.Future[None] | None = None

    async def __aenter__(self) -> LoopTicker:
        self._task = asyncio.ensure_future(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.ticks += 1


def connect_raw(path: Path | str, **kwargs: Any) -> sqlite3.Connection:
    """A DB-API connection that bypasses the store, through the same SQLite library it uses.

    A second SQLite library in one process does not see the store's POSIX locks, and closing
    its connection can release them or delete the live -wal file.
    """
    connection: sqlite3.Connection = RAW_SQLITE.connect(path, **kwargs)
    return connection


def undo_owner_revision(connection: sqlite3.Connection) -> None:
    """Take revision 0009's columns and indexes off ``sessions`` (a home from before it)."""
    for index in (
        "uq_sessions_key_without_owner",
        "uq_sessions_owner_key",
        "ix_sessions_cwd_updated_at",
        "ix_sessions_owner_updated_at",
    ):
        connection.execute(f"DROP INDEX {index}")
    connection.execute('ALTER TABLE sessions DROP COLUMN "key"')
    connection.execute("ALTER TABLE sessions DROP COLUMN owner")


def snapshot(home: Path) -> dict[str, Any]:
    """The schema and every table's rows, as the backend reads them, to prove nothing changed.

    Read on a connection of its own in one read snapshot, so it never waits for a writer.
    """
    backend = open_backend(default_url(home))
    engine = backend.engine("read")
    try:
        with engine.connect() as connection, connection.begin():
            return raw_snapshot(connection)
    finally:
        engine.dispose()


def idle_link(store: SessionStore) -> DriverLink:
    """The link a store opened on its loop left idle (taken and kept idle again)."""
    from soong_store.store import runtime_of

    readers = runtime_of(store)._readers
    assert readers is not None
    link = readers.lend()
    assert isinstance(link, DriverLink)
    readers.keep(link)
    return link


def text(value: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": value}]


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A PostgreSQL server's URL for the whole run (``tests/postgres_server.py`` says which)."""
    try:
        with postgres_server.provide() as url:
            try:
                yield url
            finally:
                postgres_server.drop_templates(url)
    except postgres_server.ServerUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def pg_database_url(pg_url: str) -> Iterator[str]:
    """The URL of a new, empty database of its own for one test, dropped after it."""
    with postgres_server.fresh_database(pg_url) as url:
        yield url
