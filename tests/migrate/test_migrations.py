"""Alembic migrations: upgrade, drift, per-session revisions, refusals and concurrent opening.

SQLite-only, on purpose: revisions are proved on database files (a 50-session file copied per
test, file digests, ``sqlite_master`` and PRAGMA ``table_info``/``index_list``), with the journal
mode of a foreign file left as it was, and batch mode rebuilding SQLite's tables.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

import soong_store
from soong_store import InvalidIdentifier, SchemaVersionError, SessionStore
from soong_store.backends.sqlite.backend import make_engine
from soong_store.migrate.upgrade import (
    HEAD_REVISION,
    alembic_config,
    current_revision,
    head_revision,
    script_location,
    session_ids,
    session_table_names,
)
from soong_store.schema.session_tables import is_session_table
from soong_store.schema.tables import metadata
from soong_store.search.index import is_search_table
from tests.conftest import RAW_SQLITE, connect_raw, db_path, snapshot, text

pytestmark = pytest.mark.sqlite

REPO_ROOT = Path(__file__).resolve().parents[2]
UNKNOWN = "ffffffffffff"
SESSIONS = 50

THROWAWAY_REVISION = """\
import sqlalchemy as sa
from alembic import op

from soong_store.migrate.upgrade import session_table_names

revision = "ztest_flags"
down_revision = "{down}"
branch_labels = None
depends_on = None


def upgrade():
    for name in session_table_names(op.get_bind(), "nodes"):
        with op.batch_alter_table(name) as batch:
            batch.add_column(sa.Column("flags", sa.Integer()))


def downgrade():
    for name in session_table_names(op.get_bind(), "nodes"):
        with op.batch_alter_table(name) as batch:
            batch.drop_column("flags")
"""

WORKER = """\
import asyncio, sys, time
from pathlib import Path
from soong_store import SessionStore

home, go = Path(sys.argv[1]), Path(sys.argv[2])
deadline = time.monotonic() + 30
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.002)


async def main():
    async with SessionStore(home=home) as store:
        await store.create_session(str(home))


asyncio.run(main())
"""


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def query(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    con = connect_raw(path)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def global_schema(path: Path) -> list[tuple[Any, ...]]:
    return [
        row
        for row in query(path, "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name")
        if not is_session_table(row[2])
    ]


def columns(path: Path, table: str) -> list[str]:
    return [row[1] for row in query(path, f'PRAGMA table_info("{table}")')]


def table_names(path: Path, prefix: str) -> list[str]:
    rows = query(path, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    return [name for (name,) in rows if name.startswith(prefix)]


def exclude_session_tables(name: str | None, type_: str, parent_names: Any) -> bool:
    return not (
        type_ == "table" and name is not None and (is_session_table(name) or is_search_table(name))
    )


async def fill(home: Path, sessions: int) -> list[str]:
    async with SessionStore(home=home) as store:
        sids = []
        for i in range(sessions):
            session = await store.create_session(f"/tmp/project{i}")
            await store.append_node(session.session_id, "user", "message", text(f"hello {i}"))
            sids.append(session.session_id)
        return sids


@pytest.fixture(scope="module")
def fifty_sessions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("fifty") / "home"
    asyncio.run(fill(home, SESSIONS))
    assert not Path(f"{db_path(home)}-wal").exists()
    return db_path(home)


@pytest.fixture
def fifty(fifty_sessions: Path, home: Path) -> Path:
    home.mkdir()
    shutil.copyfile(fifty_sessions, db_path(home))
    return db_path(home)


@pytest.fixture
def throwaway(tmp_path: Path) -> Path:
    versions = tmp_path / "extra_versions"
    versions.mkdir()
    (versions / "ztest_flags.py").write_text(THROWAWAY_REVISION.format(down=head_revision()))
    return versions


def migrate(path: Path, versions: Path, action: str, target: str) -> None:
    engine = make_engine(url_of(path), "admin")
    try:
        with engine.connect() as connection, connection.begin():
            config = alembic_config(connection)
            config.set_main_option("path_separator", "os")
            config.set_main_option(
                "version_locations",
                os.pathsep.join([str(Path(script_location()) / "versions"), str(versions)]),
            )
            getattr(command, action)(config, target)
    finally:
        engine.dispose()


def node_rows(path: Path, original: dict[str, list[str]]) -> dict[str, list[tuple[Any, ...]]]:
    return {
        table: query(path, f'SELECT {", ".join(cols)} FROM "{table}" ORDER BY node_seq')
        for table, cols in original.items()
    }


def events_state(path: Path) -> dict[str, Any]:
    return {
        table: (
            query(path, "SELECT sql FROM sqlite_master WHERE tbl_name = ? ORDER BY name", table),
            query(path, f'SELECT * FROM "{table}" ORDER BY seq'),
        )
        for table in table_names(path, "events_")
    }


def test_upgrade_creates_global_tables_at_head(tmp_path: Path) -> None:
    path = tmp_path / "fresh.sqlite"
    soong_store.upgrade(url_of(path))
    names = {row[0] for row in query(path, "SELECT name FROM sqlite_master WHERE type='table'")}
    names = {name for name in names if not is_search_table(name)}
    assert names == {
        "alembic_version",
        "sessions",
        "agents",
        "runs",
        "artifacts",
        "session_files",
        "session_moves",
        "shard_files",
        "session_keys",
        "home_identity",
        "keyed_states",
        "run_usage",
    }
    assert soong_store.current_revision(url_of(path)) == head_revision()
    assert query(path, "SELECT version_num FROM alembic_version") == [(head_revision(),)]


def test_current_revision_of_empty_file_is_none(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    path.touch()
    assert soong_store.current_revision(url_of(path)) is None
    assert path.read_bytes() == b""


def test_upgrading_twice_is_harmless(tmp_path: Path) -> None:
    path = tmp_path / "twice.sqlite"
    soong_store.upgrade(url_of(path))
    before = global_schema(path)
    soong_store.upgrade(url_of(path))
    assert global_schema(path) == before
    assert query(path, "SELECT version_num FROM alembic_version") == [(head_revision(),)]


def test_upgrade_accepts_an_engine(tmp_path: Path) -> None:
    path = tmp_path / "engine.sqlite"
    engine = make_engine(url_of(path), "admin")
    try:
        soong_store.upgrade(engine)
        assert soong_store.current_revision(engine) == head_revision()
    finally:
        engine.dispose()


async def test_autogenerate_finds_no_difference_after_upgrade(home: Path) -> None:
    await fill(home, 3)
    engine = make_engine(url_of(db_path(home)), "admin")
    try:
        with engine.connect() as connection:
            filtered = MigrationContext.configure(
                connection, opts={"include_name": exclude_session_tables, "compare_type": True}
            )
            assert compare_metadata(filtered, metadata) == []
            unfiltered = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(unfiltered, metadata) != []
    finally:
        engine.dispose()


def alembic_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_alembic_cli_upgrades_head_from_repository_root(tmp_path: Path) -> None:
    url = url_of(tmp_path / "cli.sqlite")
    upgraded = alembic_cli("-x", f"url={url}", "upgrade", "head")
    assert upgraded.returncode == 0, upgraded.stderr
    current = alembic_cli("-x", f"url={url}", "current")
    assert current.returncode == 0, current.stderr
    assert f"{head_revision()} (head)" in current.stdout
    assert soong_store.current_revision(url) == head_revision()


def test_alembic_cli_uses_soong_agent_home_without_url(tmp_path: Path) -> None:
    env = {**os.environ, "SOONG_AGENT_HOME": str(tmp_path / "agent_home")}
    upgraded = alembic_cli("upgrade", "head", env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert current_revision(url_of(tmp_path / "agent_home" / "sessions.sqlite")) == head_revision()


async def test_alembic_cli_check_ignores_session_tables(home: Path) -> None:
    await fill(home, 2)
    checked = alembic_cli("-x", f"url={url_of(db_path(home))}", "check")
    assert checked.returncode == 0, checked.stderr + checked.stdout
    assert "No new upgrade operations detected" in checked.stdout + checked.stderr


def test_session_table_names_lists_every_session(fifty: Path) -> None:
    engine = make_engine(url_of(fifty), "admin")
    try:
        with engine.connect() as connection:
            nodes = session_table_names(connection, "nodes")
            events = session_table_names(connection, "events")
            with pytest.raises(ValueError):
                session_table_names(connection, "sessions")  # type: ignore[arg-type]
    finally:
        engine.dispose()
    assert len(nodes) == SESSIONS
    assert nodes == table_names(fifty, "nodes_")
    assert events == table_names(fifty, "events_")


def test_session_ids_refuses_an_unsafe_stored_id(fifty: Path) -> None:
    con = connect_raw(fifty)
    with con:
        con.execute(
            "INSERT INTO sessions (session_id, cwd, root_agent_id, status, created_at, "
            "updated_at) VALUES ('x; DROP TABLE runs', '/', 'agent_x', 'active', 't', 't')"
        )
    con.close()
    engine = make_engine(url_of(fifty), "admin")
    try:
        with engine.connect() as connection, pytest.raises(InvalidIdentifier):
            session_ids(connection)
    finally:
        engine.dispose()


def test_session_revision_adds_column_to_every_nodes_table(fifty: Path, throwaway: Path) -> None:
    original = {table: columns(fifty, table) for table in table_names(fifty, "nodes_")}
    assert len(original) == SESSIONS
    rows = node_rows(fifty, original)
    events = events_state(fifty)

    migrate(fifty, throwaway, "upgrade", "ztest_flags")

    for table, cols in original.items():
        assert columns(fifty, table) == [*cols, "flags"]
    assert node_rows(fifty, original) == rows
    assert events_state(fifty) == events
    assert query(fifty, "SELECT version_num FROM alembic_version") == [("ztest_flags",)]


def structure(path: Path, table: str) -> dict[str, Any]:
    indexes = {
        name: (unique, origin, query(path, f'PRAGMA index_info("{name}")'))
        for _, name, unique, origin, _ in query(path, f'PRAGMA index_list("{table}")')
    }
    return {
        "columns": query(path, f'PRAGMA table_info("{table}")'),
        "indexes": indexes,
        "foreign_keys": query(path, f'PRAGMA foreign_key_list("{table}")'),
    }


def test_session_revision_downgrade_restores_every_nodes_table(
    fifty: Path, throwaway: Path
) -> None:
    original = {table: columns(fifty, table) for table in table_names(fifty, "nodes_")}
    shapes = {table: structure(fifty, table) for table in original}
    rows = node_rows(fifty, original)
    events = events_state(fifty)

    migrate(fifty, throwaway, "upgrade", "ztest_flags")
    migrate(fifty, throwaway, "downgrade", head_revision())

    assert {table: structure(fifty, table) for table in original} == shapes
    assert node_rows(fifty, original) == rows
    assert events_state(fifty) == events
    assert query(fifty, "SELECT version_num FROM alembic_version") == [(head_revision(),)]
    con = connect_raw(fifty)
    try:
        for table in original:
            with pytest.raises(RAW_SQLITE.IntegrityError, match="UNIQUE"):
                con.execute(
                    f"INSERT INTO \"{table}\" SELECT 'node_dup', node_seq, parent_id, agent_id, "
                    f"run_id, role, node_type, content_json, metadata_json, token_count, "
                    f'created_at FROM "{table}" LIMIT 1'
                )
    finally:
        con.close()


async def open_store(path: Path) -> None:
    async with SessionStore(home=path.parent):
        pass


async def run_upgrade(path: Path) -> None:
    soong_store.upgrade(url_of(path))


OPENERS = [pytest.param(open_store, id="store"), pytest.param(run_upgrade, id="upgrade")]


@pytest.mark.parametrize("opener", OPENERS)
async def test_unknown_revision_is_refused_and_left_untouched(
    home: Path, opener: Callable[[Path], Awaitable[None]]
) -> None:
    await fill(home, 1)
    path = db_path(home)
    con = connect_raw(path)
    with con:
        con.execute("UPDATE alembic_version SET version_num = ?", (UNKNOWN,))
    con.close()
    before = digest(path)

    with pytest.raises(SchemaVersionError) as raised:
        await opener(path)

    assert UNKNOWN in str(raised.value)
    assert digest(path) == before
    assert query(path, "SELECT version_num FROM alembic_version") == [(UNKNOWN,)]
    assert current_revision(url_of(path)) == UNKNOWN


@pytest.mark.parametrize("opener", OPENERS)
async def test_revision_from_newer_code_is_refused_and_left_untouched(
    fifty: Path, throwaway: Path, opener: Callable[[Path], Awaitable[None]]
) -> None:
    migrate(fifty, throwaway, "upgrade", "ztest_flags")
    before = digest(fifty)

    with pytest.raises(SchemaVersionError):
        await opener(fifty)

    assert digest(fifty) == before
    assert query(fifty, "SELECT version_num FROM alembic_version") == [("ztest_flags",)]


@pytest.mark.parametrize("opener", OPENERS)
async def test_foreign_database_is_refused_and_left_untouched(
    home: Path, opener: Callable[[Path], Awaitable[None]]
) -> None:
    home.mkdir()
    path = db_path(home)
    con = connect_raw(path)
    with con:
        con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        con.execute("INSERT INTO notes (body) VALUES ('mine')")
    con.close()
    before = digest(path)

    with pytest.raises(SchemaVersionError, match="notes"):
        await opener(path)

    assert digest(path) == before
    assert query(path, "SELECT name FROM sqlite_master") == [("notes",)]
    assert query(path, "PRAGMA journal_mode") == [("delete",)]


async def test_reopening_a_database_at_head_does_not_run_alembic(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [sid] = await fill(home, 1)
    before = snapshot(home)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("alembic upgrade ran on a database already at head")

    monkeypatch.setattr(command, "upgrade", refuse)
    async with SessionStore(home=home) as store:
        assert (await store.get_session(sid)).session_id == sid
    assert snapshot(home) == before


def test_head_revision_constant_is_the_migrations_folders_head() -> None:
    assert head_revision() == HEAD_REVISION


async def test_opening_a_database_at_head_does_not_import_alembic(home: Path) -> None:
    await fill(home, 1)
    code = (
        "import asyncio, sys\n"
        "from soong_store import SessionStore\n"
        "async def main():\n"
        "    async with SessionStore(home=sys.argv[1]) as store:\n"
        "        assert len(await store.list_sessions()) == 1\n"
        "asyncio.run(main())\n"
        "print('alembic' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(home)], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"


def test_processes_opening_an_empty_database_upgrade_it_once(home: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(home), str(go)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    go.touch()
    outputs = [worker.communicate(timeout=60) for worker in workers]

    for worker, (_, stderr) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, stderr
        assert "database is locked" not in stderr
    path = db_path(home)
    assert query(path, "SELECT version_num FROM alembic_version") == [(head_revision(),)]
    assert query(path, "SELECT count(*) FROM sessions") == [(4,)]
    reference = tmp_path / "reference.sqlite"
    soong_store.upgrade(url_of(reference))
    assert global_schema(path) == global_schema(reference)


def test_threads_upgrading_an_empty_database_upgrade_it_once(tmp_path: Path) -> None:
    path = tmp_path / "threads.sqlite"
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait(timeout=10)
            soong_store.upgrade(url_of(path))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert query(path, "SELECT version_num FROM alembic_version") == [(head_revision(),)]


def test_current_revision_never_creates_a_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.sqlite"
    assert soong_store.current_revision(f"sqlite:///{missing}") is None
    assert not missing.exists()
