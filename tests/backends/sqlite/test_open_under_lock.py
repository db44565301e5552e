"""Opening a database already at head takes no write lock: it never waits behind a writer.

SQLite-only, on purpose: the writer is another connection holding ``BEGIN IMMEDIATE`` on the
database file, SQLite's one write lock for the whole file.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from soong_store import SessionStore
from soong_store.migrate.upgrade import current_revision, head_revision, upgrade
from tests.conftest import connect_raw, db_path, text

pytestmark = pytest.mark.sqlite

# Far below the writer's own patience (120 s) and any lock timeout of the old open path: an open
# that waits for the lock fails these bounds, an open that does not is done in well under a second.
PATIENCE_S = 30.0


@pytest.fixture
def write_lock(home: Path) -> Iterator[None]:
    """Another connection holds the database's write lock for the whole test."""
    holder = connect_raw(db_path(home), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO alembic_version SELECT 'held' WHERE 0")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


async def make_session(home: Path) -> str:
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_node(sid, "user", "message", text("q"))
        return sid


@pytest.fixture
async def sid(home: Path) -> str:
    return await make_session(home)


async def test_open_and_read_while_another_connection_writes(
    home: Path, sid: str, write_lock: None
) -> None:
    store = SessionStore(home=home)
    await asyncio.wait_for(store.open(), PATIENCE_S)
    try:
        sessions = await asyncio.wait_for(store.list_sessions(), PATIENCE_S)
        assert [s.session_id for s in sessions] == [sid]
        assert len(await store.active_path(sid)) == 1
    finally:
        await asyncio.wait_for(store.close(), PATIENCE_S)


def test_cli_reads_while_another_connection_writes(home: Path, sid: str, write_lock: None) -> None:
    environ = {k: v for k, v in os.environ.items() if k != "SOONG_AGENT_HOME"}
    for args in (["sessions"], ["show", sid], ["path", sid]):
        done = subprocess.run(
            [sys.executable, "-m", "soong_store", "--home", str(home), *args],
            capture_output=True,
            text=True,
            env=environ,
            timeout=PATIENCE_S,
        )
        assert done.returncode == 0, done.stderr
        assert sid in done.stdout or "q" in done.stdout


async def test_an_upgrade_still_takes_the_lock(tmp_path: Path) -> None:
    """A database that needs its schema waits for the writer (and is upgraded once it may)."""
    home = tmp_path / "home"
    home.mkdir()
    holder = connect_raw(db_path(home), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    store = SessionStore(home=home)
    opening = asyncio.create_task(store.open())
    await asyncio.sleep(0.5)
    assert not opening.done()
    holder.execute("ROLLBACK")
    holder.close()
    await asyncio.wait_for(opening, PATIENCE_S)
    try:
        assert await store.list_sessions() == []
    finally:
        await store.close()


async def test_revision_and_upgrade_at_head_take_no_lock(
    home: Path, sid: str, write_lock: None
) -> None:
    del sid
    url = f"sqlite:///{db_path(home)}"
    found = await asyncio.wait_for(asyncio.to_thread(current_revision, url), PATIENCE_S)
    assert found == head_revision()
    await asyncio.wait_for(asyncio.to_thread(upgrade, url), PATIENCE_S)
