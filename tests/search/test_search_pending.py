"""FTS5 takes lone nodes' rows in by batches (those above ``search_mark``); searches see them."""

from __future__ import annotations

from pathlib import Path

import pytest

from soong_store import SessionStore
from soong_store.backends.sqlite.search import CATCH_UP_AT
from soong_store.check.run import check_store
from tests.conftest import connect_raw, db_path, text
from tests.search.test_search_sqlite import downgrade_to

pytestmark = pytest.mark.asyncio


def counts(home: Path) -> tuple[int, int]:
    """Rows waiting above the index's mark, and the segments of FTS5's index."""
    raw = connect_raw(db_path(home))
    try:
        [(noted,)] = raw.execute(
            "SELECT count(*) FROM search_text WHERE doc_id > (SELECT indexed_upto FROM search_mark)"
        ).fetchall()
        [(segments,)] = raw.execute("SELECT count(DISTINCT segid) FROM search_fts_idx").fetchall()
    finally:
        raw.close()
    return noted, segments


async def test_lone_appends_write_no_segment_until_a_search_takes_them_in(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        nodes = [
            await store.append_node(sid, "user", "message", text(f"a lone heron {i}"))
            for i in range(3)
        ]
        assert counts(home) == (3, 0)
        hits = await store.search("heron")
        assert sorted(hit.node_id for hit in hits) == sorted(n.node_id for n in nodes)
        assert counts(home) == (0, 1)
        assert (await check_store(store)).ok


async def test_the_writer_takes_rows_in_once_it_noted_enough(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        for i in range(CATCH_UP_AT + 2):
            await store.append_node(sid, "user", "message", text(f"a batched ibis {i}"))
        assert counts(home) == (2, 1)
        assert len(await store.search("ibis", limit=100)) == CATCH_UP_AT + 2


async def test_a_search_finds_rows_another_store_noted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as writer, SessionStore(home=home) as reader:
        sid = (await writer.create_session(cwd=".")).session_id
        assert await reader.search("egret") == []
        node = await writer.append_node(sid, "user", "message", text("an egret elsewhere"))
        assert [hit.node_id for hit in await reader.search("egret")] == [node.node_id]


async def test_batched_rows_rank_as_rows_indexed_at_once(tmp_path: Path) -> None:
    bodies = [f"{'crane ' * (i % 4 + 1)}and {'stork ' * (i % 3)}number {i}" for i in range(20)]
    found = []
    for lone in (True, False):
        home = tmp_path / ("lone" if lone else "unit")
        async with SessionStore(home=home) as store:
            sid = (await store.create_session(cwd=".")).session_id
            if lone:
                for body in bodies:
                    await store.append_node(sid, "user", "message", text(body))
            else:
                async with store.transaction(sid) as tx:
                    for body in bodies:
                        tx.add_node("user", "message", text(body))
            hits = await store.search('crane "stork number"', limit=50)
            found.append([(hit.node_seq, hit.rank, hit.snippet) for hit in hits])
    assert found[0] == found[1] and len(found[0]) > 5


async def test_deleting_a_session_removes_its_rows_taken_in_or_not(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as store:
        gone, kept = [(await store.create_session(cwd=".")).session_id for _ in range(2)]
        for i in range(CATCH_UP_AT + 3):
            await store.append_node(gone, "user", "message", text(f"a doomed petrel {i}"))
        await store.append_node(kept, "user", "message", text("a kept petrel"))
        assert counts(home)[0] == 4
        await store.delete_session(gone)
        assert counts(home)[0] == 1
        assert [hit.session_id for hit in await store.search("petrel")] == [kept]
        assert (await check_store(store)).ok


async def test_the_revision_notes_rows_of_a_database_indexed_row_by_row(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        old = await store.append_node(sid, "user", "message", text("an older shag"))
    downgrade_to(db_path(home), "0004")
    raw = connect_raw(db_path(home))
    try:
        names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
        [(trigger,)] = raw.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'search_text_ai'"
        ).fetchall()
        [(indexed,)] = raw.execute(
            "SELECT count(*) FROM search_fts WHERE search_fts MATCH 'shag'"
        ).fetchall()
    finally:
        raw.close()
    assert "search_pending" not in names and "search_fts(rowid" in trigger.replace(" ", "")
    assert indexed == 1
    async with SessionStore(home=home) as store:
        new = await store.append_node(sid, "user", "message", text("a newer shag"))
        assert counts(home) == (1, 1)
        hits = await store.search("shag")
        assert sorted(hit.node_id for hit in hits) == sorted([old.node_id, new.node_id])
        assert (await check_store(store)).ok


async def test_a_library_without_fts5_writes_and_leaves_its_rows_waiting(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
    async with SessionStore(home=home, sqlite_module="tests.backends.sqlite.no_fts5") as store:
        for i in range(CATCH_UP_AT + 1):
            await store.append_node(sid, "user", "message", text(f"an unindexed gull {i}"))
    assert counts(home) == (CATCH_UP_AT + 1, 0)
    async with SessionStore(home=home) as store:
        assert len(await store.search("gull", limit=100)) == CATCH_UP_AT + 1
        assert (await check_store(store)).ok


def schema_names(home: Path) -> set[str]:
    raw = connect_raw(db_path(home))
    try:
        return {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
    finally:
        raw.close()


async def test_the_revision_takes_in_the_rows_0005_left_noted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        nodes = [
            await store.append_node(sid, "user", "message", text(f"a noted cormorant {i}"))
            for i in range(3)
        ]
    downgrade_to(db_path(home), "0005")
    assert "search_pending" in schema_names(home) and "search_mark" not in schema_names(home)
    raw = connect_raw(db_path(home))
    try:  # as 0005's writer leaves its last two rows: noted, not in the index
        last_two = "FROM search_text WHERE doc_id > (SELECT max(doc_id) - 2 FROM search_text)"
        delete = "INSERT INTO search_fts(search_fts, rowid, body) SELECT 'delete', doc_id, body"
        raw.execute(f"{delete} {last_two}")
        raw.execute(f"INSERT INTO search_pending(doc_id) SELECT doc_id {last_two}")
        raw.commit()
        [(indexed,)] = raw.execute(
            "SELECT count(*) FROM search_fts WHERE search_fts MATCH 'cormorant'"
        ).fetchall()
    finally:
        raw.close()
    assert indexed == 1
    async with SessionStore(home=home) as store:
        names = schema_names(home)
        assert "search_mark" in names and "search_text_ai" not in names
        assert "search_pending" not in names
        assert counts(home)[0] == 0
        hits = await store.search("cormorant")
        assert sorted(hit.node_id for hit in hits) == sorted(n.node_id for n in nodes)
        assert (await check_store(store)).ok


async def test_a_row_after_deleting_the_last_rows_taken_in_still_waits(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with SessionStore(home=home) as store:
        kept, gone = [(await store.create_session(cwd=".")).session_id for _ in range(2)]
        await store.append_node(kept, "user", "message", text("an early puffin"))
        for i in range(3):
            await store.append_node(gone, "user", "message", text(f"a doomed puffin {i}"))
        assert len(await store.search("puffin")) == 4
        await store.delete_session(gone)
        new = await store.append_node(kept, "user", "message", text("a late puffin auk"))
        assert counts(home)[0] == 1
        assert [hit.node_id for hit in await store.search("auk")] == [new.node_id]
        assert (await check_store(store)).ok
