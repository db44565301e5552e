"""Opening a SQLite store on the read pool's first connection: what a new process pays first.

A database at head is opened on one connection, which reads the revision and then serves the
first read; no admin connection is made and the write engine is made at the first write. The
first connection leaves the file's journal mode alone until the revision is known, so a file
the store refuses stays byte for byte as it was, and a file at head in rollback-journal mode is
switched to WAL at the open. SQLite files: journal modes and the file's bytes are SQLite's.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, event

from soong_store import SchemaVersionError, SessionStore, upgrade
from soong_store.backends.base import Role
from soong_store.backends.sqlite.backend import SQLiteBackend
from soong_store.home import SQLITE_MODULE_ENV
from soong_store.migrate.upgrade import HEAD_REVISION
from soong_store.store import runtime_of
from tests.conftest import RAW_SQLITE, LoopTicker, connect_raw, db_path, idle_link, text

pytestmark = pytest.mark.sqlite

OPENER = """\
import asyncio, sys, time
from pathlib import Path
from soong_store import SessionStore

home, go = Path(sys.argv[1]), Path(sys.argv[2])
deadline = time.monotonic() + 30
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.002)


async def main():
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(str(home))).session_id
        await store.append_node(sid, "user", "message", [{"type": "text", "text": "hi"}])


asyncio.run(main())
"""


class Made:
    """The engines a store's backend makes, and the connections they open, by role."""

    def __init__(self) -> None:
        self.engines: list[Role] = []
        self.connections: list[Role] = []


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Made:
    seen = Made()
    original = SQLiteBackend.engine

    def engine(self: SQLiteBackend, role: Role) -> Engine:
        built = original(self, role)
        seen.engines.append(role)
        event.listen(built, "connect", lambda *_: seen.connections.append(role))
        return built

    monkeypatch.setattr(SQLiteBackend, "engine", engine)
    return seen


def url_of(home: Path) -> str:
    return f"sqlite:///{db_path(home)}"


def journal_mode(home: Path) -> str:
    connection = connect_raw(db_path(home))
    try:
        return str(connection.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        connection.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def new_threads(before: set[threading.Thread]) -> list[str]:
    """The names of the threads alive now that were not in ``before``."""
    return sorted(t.name for t in threading.enumerate() if t not in before)


def readers_end(before: set[threading.Thread]) -> bool:
    """Whether every reader thread started since ``before`` ends within a few seconds."""
    deadline = time.monotonic() + 10
    while any(name.startswith("soong-store-read") for name in new_threads(before)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


async def make_session(home: Path) -> str:
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_node(sid, "user", "message", text("hello"))
        return sid


async def test_a_database_at_head_opens_and_reads_on_one_connection(home: Path, made: Made) -> None:
    sid = await make_session(home)
    made.engines.clear()
    made.connections.clear()
    async with SessionStore(home=home) as store:
        assert made.engines == [] and runtime_of(store).read_engine is None  # a link only
        assert [node.node_seq for node in await store.active_path(sid)] == [1]
        assert (await store.get_session(sid)).session_id == sid
        assert made.engines == []
        await store.append_node(sid, "assistant", "message", text("hi"))
        assert made.engines == ["write"] and made.connections == ["write"]
        assert [node.node_seq for node in await store.active_path(sid)] == [1, 2]
    assert made.engines == ["write"]


async def test_the_read_engine_takes_the_open_s_connection_over(home: Path, made: Made) -> None:
    sid = await make_session(home)
    made.engines.clear()
    made.connections.clear()
    async with SessionStore(home=home) as store:
        readers = runtime_of(store)._readers
        assert readers is not None
        driver = idle_link(store).connection.driver_connection
        assert len((await store.context(sid)).nodes) == 1  # on the link
        assert made.engines == []
        assert [s.session_id for s in await store.list_sessions()] == [sid]  # needs the engine
        assert made.engines == ["read"] and made.connections == ["read"]
        taken = readers.lend()
        assert isinstance(taken, Connection) and taken.connection.driver_connection is driver
        assert taken.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000  # set up anew
        readers.keep(taken)
        assert len((await store.context(sid)).nodes) == 1
    with pytest.raises(RAW_SQLITE.ProgrammingError):  # closed with the engine
        driver.execute("SELECT 1")


async def test_closing_a_store_that_read_only_on_its_link_closes_it(home: Path) -> None:
    sid = await make_session(home)
    store = SessionStore(home=home)
    await store.open()
    link = idle_link(store)
    assert (await store.get_session(sid)).session_id == sid
    await store.close()
    assert link.closed and runtime_of(store).read_engine is None
    with pytest.raises(RAW_SQLITE.ProgrammingError):
        link.connection.driver_connection.execute("SELECT 1")


async def test_a_store_that_only_reads_makes_no_write_engine(home: Path, made: Made) -> None:
    sid = await make_session(home)
    made.engines.clear()
    async with SessionStore(home=home) as store:
        assert len((await store.context(sid)).nodes) == 1
        assert [s.session_id for s in await store.list_sessions()] == [sid]
    assert made.engines == ["read"]


async def test_the_write_engine_is_made_once_per_open(home: Path, made: Made) -> None:
    store = SessionStore(home=home)
    await store.open()
    engine = runtime_of(store).write_engine
    assert engine is not None and made.engines.count("write") == 1
    sid = (await store.create_session(cwd=".")).session_id
    await store.append_node(sid, "user", "message", text("q"))
    assert runtime_of(store).write_engine is engine and made.engines.count("write") == 1
    await store.close()
    assert runtime_of(store).write_engine is None
    async with store:
        await store.append_node(sid, "user", "message", text("again"))
        assert runtime_of(store).write_engine is not engine
    assert made.engines.count("write") == 2


async def test_an_empty_home_is_upgraded_on_an_admin_connection(home: Path, made: Made) -> None:
    async with SessionStore(home=home) as store:
        assert made.engines == ["read", "admin"]
        assert await store.list_sessions() == []
        assert journal_mode(home) == "wal"
    assert made.connections.count("read") == 1


async def test_a_file_at_head_in_rollback_mode_is_switched_to_wal_at_open(
    home: Path, made: Made
) -> None:
    home.mkdir()
    upgrade(url_of(home))
    assert journal_mode(home) == "delete"
    made.engines.clear()
    async with SessionStore(home=home) as store:
        assert journal_mode(home) == "wal"
        assert made.engines == ["read"]  # no link (not in WAL): the thread's engine, no admin
        assert await store.list_sessions() == []


async def test_an_unknown_revision_in_rollback_mode_is_refused_untouched(home: Path) -> None:
    home.mkdir()
    upgrade(url_of(home))
    path = db_path(home)
    con = connect_raw(path)
    with con:
        con.execute("UPDATE alembic_version SET version_num = 'f00dcafe'")
    con.close()
    before = digest(path)

    with pytest.raises(SchemaVersionError, match="f00dcafe"):
        await SessionStore(home=home).open()

    assert digest(path) == before
    assert journal_mode(home) == "delete"
    assert not path.with_name(path.name + "-wal").exists()


def test_processes_opening_an_old_home_together_upgrade_it_once(home: Path, tmp_path: Path) -> None:
    home.mkdir()
    upgrade(url_of(home), "0003")
    go = tmp_path / "go"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(home), str(go)],
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
    con = connect_raw(db_path(home))
    try:
        assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (HEAD_REVISION,)
        ]
        assert con.execute("SELECT count(*) FROM sessions").fetchall() == [(4,)]
    finally:
        con.close()
    assert journal_mode(home) == "wal"


async def test_a_database_at_head_opens_and_reads_on_the_callers_loop(home: Path) -> None:
    sid = await make_session(home)
    before = set(threading.enumerate())
    async with SessionStore(home=home) as store:
        assert new_threads(before) == []
        assert len((await store.context(sid)).nodes) == 1
        assert new_threads(before) == []  # a small read on the open's connection, on the loop
        assert len(await store.list_nodes(sid)) == 1  # no limit: a reader thread's
        assert new_threads(before) == ["soong-store-read_0"]
        connection = runtime_of(store)._readers.lend()  # type: ignore[union-attr]
        assert connection is not None
        try:  # the open's connection waits for locks again, as every reader's does
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
        finally:
            runtime_of(store)._readers.keep(connection)  # type: ignore[union-attr]
    assert readers_end(before)


async def test_an_open_that_would_wait_for_a_lock_waits_on_a_thread(home: Path) -> None:
    sid = await make_session(home)
    holder = connect_raw(db_path(home), isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")  # readers too are kept out while it is held
    before = set(threading.enumerate())
    store = SessionStore(home=home)
    try:
        async with LoopTicker() as ticker:
            opening = asyncio.ensure_future(store.open())
            await asyncio.sleep(0.3)
            assert not opening.done()
            assert ticker.ticks >= 5  # the loop went on while the open waited
        assert new_threads(before) == ["soong-store-read_0"]
        holder.execute("COMMIT")
        holder.close()
        await asyncio.wait_for(opening, 10)
        assert len((await store.context(sid)).nodes) == 1
    finally:
        holder.close()
        await store.close()
    assert readers_end(before)


async def test_a_read_that_needs_the_engine_makes_it_on_the_loop(home: Path, made: Made) -> None:
    sid = await make_session(home)
    made.engines.clear()
    made.connections.clear()
    before = set(threading.enumerate())
    async with SessionStore(home=home) as store:
        readers = runtime_of(store)._readers
        assert readers is not None
        link = idle_link(store)
        assert [a.agent_type for a in await store.list_agents(sid)] == ["main"]  # Core, small
        assert new_threads(before) == []  # made on the loop, no thread
        assert made.engines == ["read"] and made.connections == ["read"] and link.closed
        taken = readers.lend()
        assert isinstance(taken, Connection)
        assert taken.connection.driver_connection is link.connection.driver_connection
        readers.keep(taken)


async def test_taking_the_link_over_runs_nothing_that_could_wait(home: Path) -> None:
    sid = await make_session(home)
    async with SessionStore(home=home) as store:
        link = idle_link(store)
        ran: list[str] = []
        link.connection.driver_connection.set_trace_callback(ran.append)
        assert [a.agent_type for a in await store.list_agents(sid)] == ["main"]
        # The dialect's first look (a flag, no lock), the threads' wait, then the loop's none:
        # nothing reads the schema (which may wait for a lock) before the read's own BEGIN.
        assert ran[: ran.index("BEGIN")] == [
            "PRAGMA read_uncommitted",
            "PRAGMA busy_timeout = 5000",
            "PRAGMA busy_timeout = 0",
        ]


async def test_a_refused_open_leaves_no_reader_thread(home: Path) -> None:
    await make_session(home)
    con = connect_raw(db_path(home))
    with con:
        con.execute("UPDATE alembic_version SET version_num = 'f00dcafe'")
    con.close()
    before = set(threading.enumerate())
    with pytest.raises(SchemaVersionError):
        await SessionStore(home=home).open()
    assert readers_end(before)


async def test_opens_racing_on_one_store_keep_one_set_of_reader_threads(home: Path) -> None:
    sid = await make_session(home)
    before = set(threading.enumerate())
    store = SessionStore(home=home)
    await asyncio.gather(*(store.open() for _ in range(4)))
    try:
        paths = await asyncio.gather(*(store.active_path(sid) for _ in range(8)))
        assert all(len(path) == 1 for path in paths)
        assert runtime_of(store).generation == 1
    finally:
        await store.close()
    assert readers_end(before)


async def test_an_open_whose_caller_is_cancelled_still_opens(home: Path) -> None:
    store = SessionStore(home=home)  # an empty home: the open (an upgrade) is a thread's
    opening = asyncio.ensure_future(store.open())
    await asyncio.sleep(0)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    await store.open()
    try:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_node(sid, "user", "message", text("hello"))
        assert len(await store.active_path(sid)) == 1
    finally:
        await store.close()


FIRST_READ = """\
import asyncio, sys
from soong_store import SessionStore


async def main():
    before = set(sys.modules)
    async with SessionStore(home=sys.argv[1]) as store:
        assert len((await store.context(sys.argv[2])).nodes) == 1
    print(sorted(set(sys.modules) - before))


asyncio.run(main())
"""


async def test_a_new_process_imports_nothing_to_open_and_read(home: Path) -> None:
    """Nothing but a DB-API module the process names instead of ``sqlite3``, which the store
    imports when a store is made to use it (the SQLite matrix runs so)."""
    sid = await make_session(home)
    done = subprocess.run(
        [sys.executable, "-c", FIRST_READ, str(home), sid],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    imported = ast.literal_eval(done.stdout.strip())
    driver = os.environ.get(SQLITE_MODULE_ENV, "").split(".")[0]
    assert [m for m in imported if not driver or m.split(".")[0] != driver] == []
