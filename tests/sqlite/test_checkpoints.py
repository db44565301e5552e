"""WAL checkpoints beside the writer: committed pages reach the database file without the writer.

SQLite-only: the WAL and its checkpoints are SQLite's. The database file is read on its own (a
copy without its ``-wal``), so only what a checkpoint has copied into it shows.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text

from soong_store import SessionStore
from soong_store.backends.sqlite import make_engine
from soong_store.checkpoints import Checkpointer
from soong_store.migrate import upgrade
from soong_store.schema.catalog import nodes_table_name
from soong_store.writer import Writer
from tests.conftest import db_path
from tests.conftest import text as text_block

pytestmark = [pytest.mark.sqlite, pytest.mark.asyncio]

DEADLINE_S = 20.0


def nodes_in_file_alone(database: Path, session_id: str, scratch: Path) -> int | None:
    """The session's node count in the database file without its WAL (``None``: not there yet)."""
    copy = scratch / "alone.sqlite"
    shutil.copyfile(database, copy)  # no -wal beside the copy: only checkpointed pages
    connection = sqlite3.connect(copy)
    try:
        row = connection.execute(f'SELECT count(*) FROM "{nodes_table_name(session_id)}"')
        return int(row.fetchone()[0])
    except sqlite3.DatabaseError:  # the table is not checkpointed yet, or a copy mid-write
        return None
    finally:
        connection.close()


def checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "soong-store-checkpoint"]


async def test_committed_pages_reach_the_database_file_without_more_commits(
    home: Path, tmp_path: Path
) -> None:
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        for i in range(3):  # a few dozen WAL pages: far from SQLite's own checkpoint at 1,000
            await store.append_node(sid, "user", "message", text_block(f"q{i}"))
        waited = 0.0
        while nodes_in_file_alone(db_path(home), sid, tmp_path) != 3:
            assert waited < DEADLINE_S, "no checkpoint copied the appends into the database file"
            await asyncio.sleep(0.05)
            waited += 0.05


async def test_the_checkpointer_runs_with_the_writer_and_stops_at_close(home: Path) -> None:
    store = SessionStore(home=home)
    await store.open()
    try:
        assert checkpoint_threads() == []  # nothing written yet: no writer, no checkpointer
        await store.create_session(cwd=".")
        assert len(checkpoint_threads()) == 1
    finally:
        await store.close()
    assert checkpoint_threads() == []


class Broken:
    """An engine whose connections cannot be had."""

    def raw_connection(self) -> Any:
        raise sqlite3.OperationalError("unable to open database file")


async def test_a_failing_checkpoint_is_logged_and_the_thread_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    checkpointer = Checkpointer(Broken(), interval=0.001)  # type: ignore[arg-type]
    checkpointer.start()
    try:
        with caplog.at_level(logging.WARNING, logger="soong_store.checkpoints"):
            for _ in range(2):
                before = len(caplog.records)
                checkpointer.committed()
                waited = 0.0
                while len(caplog.records) == before:
                    assert waited < DEADLINE_S
                    await asyncio.sleep(0.01)
                    waited += 0.01
        assert checkpointer.checkpoints == 0
        assert "WAL checkpoint failed" in caplog.records[0].getMessage()
    finally:
        checkpointer.close()
    assert not checkpoint_threads()


async def test_a_failing_after_batch_hook_harms_no_job(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'w.sqlite'}"
    upgrade(url)
    engine = make_engine(url, "write")

    def hook() -> None:
        raise RuntimeError("the hook broke")

    def job(conn: Connection) -> int:
        conn.execute(text("CREATE TABLE IF NOT EXISTS log (n INTEGER)"))
        conn.execute(text("INSERT INTO log (n) VALUES (1)"))
        return 1

    writer = Writer(engine, after_batch=hook)
    writer.start()
    try:
        with caplog.at_level(logging.WARNING, logger="soong_store.writer"):
            assert await writer.submit(job) == 1
            assert await writer.submit(job) == 1
        assert writer.alive
    finally:
        await writer.close()
        engine.dispose()
    assert any("after-batch hook failed" in r.getMessage() for r in caplog.records)


async def test_rows_of_one_commit_carry_one_time(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    node = await store.append_node(sid, "user", "message", text_block("q"))
    [event] = [e for e in await store.timeline(sid) if e.node_id == node.node_id]
    session = await store.get_session(sid)
    assert event.created_at == node.created_at == session.updated_at
