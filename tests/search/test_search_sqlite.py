"""Search on SQLite files: a library without FTS5, the revision's backfill, the FTS5 index."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command

from soong_store import SessionStore, StorageError
from soong_store.backends.sqlite.backend import make_engine
from soong_store.check.run import check_store
from soong_store.migrate.upgrade import alembic_config, current_revision, head_revision
from tests.conftest import connect_raw, db_path, text

pytestmark = pytest.mark.asyncio


async def test_a_sqlite_without_fts5_opens_writes_and_fails_at_search(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home, sqlite_module="tests.backends.sqlite.no_fts5") as store:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_node(sid, "user", "message", text("written without fts5"))
        assert [n.node_seq for n in await store.active_path(sid)] == [1]
        for query in ("written", ""):
            with pytest.raises(StorageError, match="FTS5") as raised:
                await store.search(query)
            assert "sqlite_module" in str(raised.value)
        done = subprocess.run(
            [sys.executable, "-m", "soong_store", "--home", str(home), "--sqlite-module",
             "tests.backends.sqlite.no_fts5", "search", "written"],
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.startswith("soong-store: search needs SQLite's FTS5")
    tables = {r[0] for r in connect_raw(db_path(home)).execute("SELECT name FROM sqlite_master")}
    assert "search_text" in tables and "search_fts" not in tables
    async with SessionStore(home=home) as store:  # a library with FTS5, on that database
        with pytest.raises(StorageError, match="without FTS5"):
            await store.search("written")


async def test_upgrade_builds_the_index_a_library_without_fts5_left_out(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home, sqlite_module="tests.backends.sqlite.no_fts5") as store:
        sid = (await store.create_session(cwd=".")).session_id
        old = await store.append_node(sid, "user", "message", text("an older capybara"))
    async with SessionStore(home=home) as store:
        with pytest.raises(StorageError, match="soong-store upgrade"):
            await store.search("capybara")
    done = subprocess.run(
        [sys.executable, "-m", "soong_store", "--home", str(home), "upgrade"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    async with SessionStore(home=home) as store:
        assert [hit.node_id for hit in await store.search("capybara")] == [old.node_id]
        new = await store.append_node(sid, "assistant", "message", text("a newer capybara"))
        hits = await store.search("capybara")
        assert sorted(hit.node_id for hit in hits) == sorted([old.node_id, new.node_id])
        assert (await check_store(store)).ok


def downgrade_to(path: Path, revision: str) -> None:
    engine = make_engine(f"sqlite:///{path}", "admin")
    try:
        with engine.connect() as connection, connection.begin():
            command.downgrade(alembic_config(connection), revision)
    finally:
        engine.dispose()


async def test_the_revision_indexes_existing_sessions_with_progress(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as store:
        sids = [(await store.create_session(cwd=".")).session_id for _ in range(3)]
        for i, sid in enumerate(sids):
            await store.append_node(sid, "user", "message", text(f"older pelican {i}"))
            await store.append_node(sid, "assistant", "message", [])
    downgrade_to(db_path(home), "0001")
    tables = {r[0] for r in connect_raw(db_path(home)).execute("SELECT name FROM sqlite_master")}
    assert not {name for name in tables if name.startswith("search_")}
    caplog.set_level(logging.INFO, logger="alembic.runtime.migration")
    async with SessionStore(home=home) as store:
        assert current_revision(f"sqlite:///{db_path(home)}") == head_revision()
        hits = await store.search("pelican")
        assert sorted(hit.session_id for hit in hits) == sorted(sids)
        assert (await check_store(store)).ok
    progress = [r.getMessage() for r in caplog.records if "search index" in r.getMessage()]
    assert progress[-1] == "search index: 3 of 3 sessions indexed"


async def test_check_finds_what_the_index_lacks_or_holds_too_many(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        kept = await store.append_node(sid, "user", "message", text("kept"))
        lost = await store.append_node(sid, "assistant", "message", text("lost"))
        assert (await check_store(store)).ok
    raw = connect_raw(db_path(home), isolation_level=None)
    try:
        raw.execute("DELETE FROM search_text WHERE node_id = ?", (lost.node_id,))
        raw.execute("UPDATE search_text SET body = 'changed' WHERE node_id = ?", (kept.node_id,))
        raw.execute(
            "INSERT INTO search_text (session_id, node_id, node_seq, agent_id, role, node_type,"
            " created_at, body) SELECT 'sess_gone', node_id, node_seq, agent_id, role,"
            " node_type, created_at, body FROM search_text"
        )
    finally:
        raw.close()
    async with SessionStore(home=home) as store:
        report = await check_store(store)
        one = await check_store(store, sid)
    found = {(p.kind, p.session_id, p.ids) for p in report.problems}
    assert found >= {
        ("search_index", sid, (lost.node_id,)),
        ("search_index", sid, (kept.node_id,)),
        ("search_index", "sess_gone", ("sess_gone",)),
    }
    assert {p.kind for p in report.problems} == {"search_index"}
    whole = [p.message for p in report.problems if p.session_id is None]
    assert whole == ["FTS5's integrity-check finds search_fts out of step with search_text"]
    assert {(p.kind, p.session_id) for p in one.problems} == {("search_index", sid)}


async def test_a_unit_of_work_is_indexed_in_one_fts5_segment(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        async with store.transaction(sid) as tx:
            for i in range(50):
                tx.add_node("user", "message", text(f"a gannet numbered {i}"))
        assert len(await store.search("gannet", limit=100)) == 50
        assert (await check_store(store)).ok
    raw = connect_raw(db_path(home))
    try:
        [(segments,)] = raw.execute("SELECT count(DISTINCT segid) FROM search_fts_idx").fetchall()
    finally:
        raw.close()
    assert segments == 1


async def test_a_probe_failing_with_the_index_there_is_not_called_a_missing_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from soong_store.backends.sqlite import search as fts

    async with SessionStore(home=tmp_path) as store:
        sid = (await store.create_session(cwd="/p")).session_id
        await store.append_node(sid, "user", "message", [{"type": "text", "text": "hello"}])
        monkeypatch.setattr(fts, "_PROBE", "SELECT no_such_column FROM search_fts LIMIT 0")
        with pytest.raises(StorageError) as raised:
            await store.search("hello")
        assert "no_such_column" in str(raised.value)
        assert "no search_fts index" not in str(raised.value)
        monkeypatch.undo()
        assert [hit.session_id for hit in await store.search("hello")] == [sid]
