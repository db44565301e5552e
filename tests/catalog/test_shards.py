"""Idle sessions' pairs move to shard files and back, and every read and feature follows them.

With the hot bound at 3 and shards of 4 (:mod:`tests.shard_support`), the writer moves the least
recently updated pairs out of ``sessions.sqlite`` between units of work; the first write to an
idle session brings its pair back in that write's own transaction. These tests look at the
files behind the store's back, so they live with the SQLite tests.
"""

from __future__ import annotations

import asyncio
import io
import logging
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

from soong_store import NotFound, SessionStore, StorageError
from soong_store.backends.sqlite import files as sqlite_files
from soong_store.backends.sqlite.backend import SQLiteBackend
from soong_store.catalog import lookup as catalog
from soong_store.catalog import moves
from soong_store.catalog import placement as pair_files
from soong_store.check.run import check_store
from soong_store.schema import session_tables
from soong_store.transfer import export_session, import_session
from tests.conftest import connect_raw, text, undo_owner_revision
from tests.shard_support import (
    assert_each_pair_in_one_file,
    limited,
    placements,
    raw_layout,
    settle,
)

pytestmark = pytest.mark.sqlite


@pytest.fixture
def small_limits() -> Iterator[Any]:
    with limited() as limits:
        yield limits


async def fill(store: SessionStore, sessions: int = 10) -> list[str]:
    """Sessions of a root, two children of it (a branch) and a run's event, one after another."""
    sids = []
    for i in range(sessions):
        sid = (await store.create_session(cwd="/p", metadata={"i": i})).session_id
        root = await store.append_node(sid, "user", "message", text(f"q{i}"))
        await store.append_node(sid, "assistant", "message", text(f"a{i}"), token_count=3)
        await store.append_node(
            sid, "user", "message", text(f"b{i}"), parent_id=root.node_id, token_count=2
        )
        await store.append_event(sid, "mark", payload={"i": i})
        sids.append(sid)
    return sids


async def reads_of(store: SessionStore, sid: str) -> dict[str, Any]:
    nodes = await store.list_nodes(sid)
    return {
        "session": await store.get_session(sid),
        "path": await store.active_path(sid),
        "tail": await store.active_path(sid, limit=1),
        "context": await store.context(sid),
        "timeline": await store.timeline(sid),
        "nodes": nodes,
        "node": await store.get_node(sid, nodes[-1].node_id),
        "children": await store.children(sid, nodes[0].node_id),
    }


async def test_idle_sessions_move_to_shards_and_read_back_the_same(
    home: Path, small_limits: Any
) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        before = {sid: await reads_of(store, sid) for sid in sids}
        placed = await settle(store)
    shards = {file for file, _ in placed.values() if file != catalog.MAIN}
    assert len(shards) >= 2
    assert sum(file == catalog.MAIN for file, _ in placed.values()) <= 3
    assert all((home / file).is_file() for file in shards)
    assert_each_pair_in_one_file(home)
    async with SessionStore(home=home) as again:  # new connections: every shard attached anew
        for sid in reversed(sids):
            assert await reads_of(again, sid) == before[sid]
        assert (await check_store(again)).ok


async def test_a_reader_holds_at_most_four_shards_and_reads_on(
    home: Path, small_limits: Any
) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store, 24)  # 21 idle pairs: six shards
        placed = await settle(store)
        assert len({file for file, _ in placed.values()}) >= 6
        for _ in range(2):
            for sid in sids:
                assert len(await store.active_path(sid)) == 2


async def test_a_write_brings_an_idle_session_back(home: Path, small_limits: Any) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        placed = await settle(store)
        idle = next(sid for sid in sids if placed[sid][0] != catalog.MAIN)
        file, epoch = placed[idle]
        node = await store.append_node(idle, "assistant", "message", text("back"))
        now = await placements(store)
        assert now[idle] == (catalog.MAIN, epoch + 1)
        path = await store.active_path(idle)
        assert [n.node_id for n in path][-1] == node.node_id
        assert [e.seq for e in await store.timeline(idle)] == list(range(1, 7))
        await settle(store)
        assert idle not in raw_layout(home)["copies"][file]
        assert_each_pair_in_one_file(home)
        assert (await check_store(store)).ok


async def test_a_clean_close_settles_the_moves_its_writes_journaled(
    home: Path, small_limits: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that brought a pair back leaves its journal row to the maintenance's next round;
    a writer that stops first (the store closing) settles it, so a clean close leaves none."""
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        placed = await settle(store)
    idle = next(sid for sid in sids if placed[sid][0] != catalog.MAIN)
    monkeypatch.setattr(moves.Maintenance, "__call__", lambda self, connection: False)
    async with SessionStore(home=home) as store:
        await store.append_node(idle, "assistant", "message", text("back"))
        assert raw_layout(home)["journal"], "the bring-back is journaled until settled"
    assert raw_layout(home)["journal"] == []
    assert_each_pair_in_one_file(home)


async def test_delete_of_an_idle_session_removes_its_copy(home: Path, small_limits: Any) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        placed = await settle(store)
        idle = next(sid for sid in sids if placed[sid][0] != catalog.MAIN)
        await store.delete_session(idle)
        with pytest.raises(NotFound):
            await store.active_path(idle)
        await settle(store)
        layout = raw_layout(home)
        assert all(idle not in sids for sids in layout["files"].values())
        assert all(idle not in copies for copies in layout["copies"].values())
        assert_each_pair_in_one_file(home)
        assert (await check_store(store)).ok


async def test_fork_export_and_import_of_an_idle_session(home: Path, small_limits: Any) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        placed = await settle(store)
        idle = next(sid for sid in sids if placed[sid][0] != catalog.MAIN)
        path = await store.active_path(idle)
        fork = await store.fork_session(idle, path[-1].node_id)
        assert [n.content for n in await store.active_path(fork.session_id)] == [
            n.content for n in path
        ]
        exported = io.StringIO()
        await export_session(store, idle, exported)
        copy = await import_session(store, io.StringIO(exported.getvalue()), new_id=True)
        assert [n.content for n in await store.list_nodes(copy.session_id)] == [
            n.content for n in await store.list_nodes(idle)
        ]
        assert (await placements(store))[idle][0] != catalog.MAIN  # reads left it where it was
        await settle(store)
        assert (await check_store(store)).ok


async def test_check_reports_stale_copies_orphan_tables_and_missing_copies(
    home: Path, small_limits: Any
) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        placed = await settle(store)
    idle = [sid for sid in sids if placed[sid][0] != catalog.MAIN]
    shard, lost = placed[idle[0]][0], idle[1]
    raw = connect_raw(home / shard)
    with raw:
        raw.execute("CREATE TABLE nodes_sess_ghost (node_id TEXT PRIMARY KEY)")
        raw.execute("INSERT INTO shard_pairs VALUES ('sess_gone', 7)")
    raw.close()
    raw = connect_raw(home / placed[lost][0])
    with raw:
        raw.execute("UPDATE shard_pairs SET epoch = epoch + 5 WHERE session_id = ?", (lost,))
    raw.close()
    seen: list[tuple[int, int]] = []
    async with SessionStore(home=home) as store:
        report = await check_store(store, progress=lambda done, total: seen.append((done, total)))
    found = {(p.kind, p.ids) for p in report.problems}
    assert found == {
        ("orphan_table", ("nodes_sess_ghost",)),
        ("stale_copy", ("sess_gone",)),
        ("shard_copy", (lost,)),
    }
    assert seen[-1] == (len(sids), len(sids))


async def test_a_journal_row_left_by_a_crash_is_settled_at_start(
    home: Path, small_limits: Any
) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        placed = await settle(store)
    hot = next(sid for sid in sids if placed[sid][0] == catalog.MAIN)
    shard = next(file for file, _ in placed.values() if file != catalog.MAIN)
    # A crash after T0 and T1 of an archive: the journal names the move, the shard a copy.
    main = connect_raw(home / "sessions.sqlite")
    with main:
        main.execute(
            "INSERT INTO session_moves VALUES (?, 'main', ?, ?)", (hot, shard, placed[hot][1] + 1)
        )
    main.close()
    raw = connect_raw(home / shard)
    with raw:
        name = session_tables.nodes_table_name(hot)
        raw.execute(f"CREATE TABLE {name} (node_id TEXT PRIMARY KEY)")
        raw.execute("INSERT INTO shard_pairs VALUES (?, ?)", (hot, placed[hot][1] + 1))
    raw.close()
    async with SessionStore(home=home) as store:
        await settle(store)
        assert len(await store.active_path(hot)) == 2
    assert_each_pair_in_one_file(home)


def test_a_connection_keeps_at_most_four_shards_attached(home: Path) -> None:
    (home / "shards").mkdir(parents=True)
    files = [f"shards/{n:04d}.sqlite" for n in range(1, 7)]
    for file in files:
        connect_raw(home / file).execute("CREATE TABLE shard_pairs (x)").connection.close()
    engine = create_engine(f"sqlite:///{home / 'sessions.sqlite'}")
    try:
        with engine.connect() as connection:
            for file in files[:4]:
                sqlite_files.attach(connection, file)
            sqlite_files.attach(connection, files[0])  # used again: the most recent now
            sqlite_files.attach(connection, files[4])
            sqlite_files.attach(connection, files[5])
            assert sqlite_files.attached_files(connection) == [files[3], files[0], *files[4:]]
            with pytest.raises(StorageError, match="0009"):
                sqlite_files.attach(connection, "shards/0009.sqlite")
            assert not (home / "shards/0009.sqlite").exists()
            names = {row[1] for row in connection.exec_driver_sql("PRAGMA database_list")}
            assert names == {"main", "s0", "s1", "s2", "s3"}
    finally:
        engine.dispose()


READER = """
import asyncio, sys
from soong_store import SessionStore

async def main(home):
    stop = asyncio.ensure_future(asyncio.to_thread(sys.stdin.readline))  # stdin closed: stop
    async with SessionStore(home=home) as store:
        sids = sorted(s.session_id for s in await store.list_sessions())
        print("READY", flush=True)
        bad, reads = [], 0
        while not stop.done():
            for sid in sids:
                seqs = [n.node_seq for n in await store.active_path(sid)]
                events = [e.seq for e in await store.timeline(sid)]
                # Two reads, two snapshots: each must be whole on its own.
                if seqs != list(range(1, len(seqs) + 1)) or events != list(
                    range(1, len(events) + 1)
                ):
                    bad.append(f"{sid} {seqs} {events}")
                reads += 2
        print(f"DONE {reads} {len(bad)}", *bad[:3], flush=True)

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_reader_in_another_process_sees_each_session_whole_while_they_move(
    home: Path, small_limits: Any
) -> None:
    async with SessionStore(home=home) as store:
        sids = [(await store.create_session(cwd="/p")).session_id for _ in range(8)]
        for sid in sids:
            await store.append_node(sid, "user", "message", text("first"))
        reader = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            READER,
            str(home),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert reader.stdin is not None and reader.stdout is not None
        assert (await reader.stdout.readline()).startswith(b"READY")
        for written in range(24):  # each session in turn: nearly every write moves a pair
            await store.append_node(sids[written % 8], "user", "message", text(f"n{written}"))
            await asyncio.sleep(0.01)
        reader.stdin.close()
        _, reads, bad, *shown = (await reader.stdout.readline()).decode().split(" ", 3)
        await reader.wait()
        assert int(bad) == 0, shown
        assert int(reads) > 0
        moved = await placements(store)
        assert any(file != catalog.MAIN for file, _ in moved.values())
        await settle(store)
        assert_each_pair_in_one_file(home)


async def test_the_least_recently_updated_move_first(home: Path, small_limits: Any) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        for sid in sids[:3]:  # the oldest three become the most recent
            await store.append_node(sid, "user", "message", text("again"))
        placed = await settle(store)
        hot = {sid for sid, (file, _) in placed.items() if file == catalog.MAIN}
        assert hot and hot <= set(sids[:3])


async def test_a_failed_first_write_leaves_the_pair_in_its_shard(
    home: Path, small_limits: Any
) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        placed = await settle(store)
        idle = next(sid for sid in sids if placed[sid][0] != catalog.MAIN)
        before = await reads_of(store, idle)
        with pytest.raises(NotFound, match="node_nothere"):
            await store.append_node(idle, "user", "message", text("x"), parent_id="node_nothere")
        assert (await placements(store))[idle] == placed[idle]
        assert await reads_of(store, idle) == before


async def test_check_compares_the_search_index_with_a_session_in_a_shard(
    home: Path, small_limits: Any
) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        placed = await settle(store)
        idle = next(sid for sid in sids if placed[sid][0] != catalog.MAIN)
        node = (await store.list_nodes(idle))[-1]
    raw = connect_raw(home / "sessions.sqlite")
    with raw:
        raw.execute("DELETE FROM search_text WHERE node_id = ?", (node.node_id,))
    raw.close()
    async with SessionStore(home=home) as store:
        report = await check_store(store)
    found = {(p.kind, p.session_id, p.ids) for p in report.problems}
    assert found == {("search_index", idle, (node.node_id,))}


async def test_shard_files_stay_proportional_to_the_pairs_they_hold(
    home: Path, small_limits: Any
) -> None:
    """Sessions written round-robin keep coming back from their shards: the files they leave
    go (empty) or are compacted (sparse), so the shard files never outnumber their pairs."""
    async with SessionStore(home=home) as store:
        sids = await fill(store, 12)
        await settle(store)
        for written in range(96):
            await store.append_node(sids[written % 12], "user", "message", text(f"n{written}"))
            if written % 12 == 11:
                await settle(store)
        placed = await settle(store)
        before = {sid: await reads_of(store, sid) for sid in sids}
        assert (await check_store(store)).ok
    layout = raw_layout(home)
    in_shards = sum(1 for file, _ in placed.values() if file != catalog.MAIN)
    files = sorted(layout["files"].keys() - {catalog.MAIN})
    *earlier, last = files
    assert all(layout["copies"][file] for file in earlier), "an empty shard file remains"
    assert len(earlier) * small_limits.shard <= 2 * in_shards  # each at least half full
    assert sorted(p.name for p in (home / "shards").iterdir()) == [f[7:] for f in files]
    assert_each_pair_in_one_file(home)
    async with SessionStore(home=home) as again:
        for sid in sids:
            assert await reads_of(again, sid) == before[sid]


async def test_a_shard_removed_since_the_catalog_was_read_is_looked_for_again(
    home: Path, small_limits: Any
) -> None:
    """A reader that read the catalog before the writer removed an emptied shard attaches
    nothing and reads again; a shard the catalog still names is missing, and says so."""
    async with SessionStore(home=home) as store:
        await fill(store)
        placed = await settle(store)
    named = next(file for file, _ in placed.values() if file != catalog.MAIN)
    engine = create_engine(f"sqlite:///{home / 'sessions.sqlite'}")
    try:
        with engine.connect() as connection:
            pair_files.attach(connection, "shards/0999.sqlite")  # gone: nothing to attach
            assert sqlite_files.attached_files(connection) == []
            (home / named).rename(home / "moved-away.sqlite")
            with pytest.raises(StorageError, match=named.split("/")[-1]):
                pair_files.attach(connection, named)
    finally:
        engine.dispose()


async def test_a_shard_that_vanishes_under_attach_is_looked_for_again(
    home: Path, small_limits: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard removed while SQLite opens it fails the ``ATTACH`` with an I/O error, not a
    missing file: a file the catalog no longer names is looked for again; one it names is a
    real failure, raised as it came."""
    async with SessionStore(home=home) as store:
        await fill(store)
        placed = await settle(store)
    named = next(file for file, _ in placed.values() if file != catalog.MAIN)

    def vanishing(connection: Any, file: str) -> str:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(SQLiteBackend, "attach", staticmethod(vanishing))
    engine = create_engine(f"sqlite:///{home / 'sessions.sqlite'}")
    try:
        with engine.connect() as connection:
            pair_files.attach(connection, "shards/0999.sqlite")
            with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
                pair_files.attach(connection, named)
    finally:
        engine.dispose()


async def test_check_on_a_live_store_passes_over_a_shard_reclaimed_meanwhile(
    home: Path, small_limits: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog check read named a shard the writer emptied and removed before check came
    to it: its sessions are checked where they are now, and no shard is reported unreadable."""
    from soong_store.check import run as check_module
    from soong_store.check.reads import database_facts
    from soong_store.store import run_read

    async with SessionStore(home=home) as store:
        sids = await fill(store)
        placed = await settle(store)
        first = min(file for file, _ in placed.values() if file != catalog.MAIN)
        stale = await run_read(store, lambda c: database_facts(c, None))
        for sid in sorted(sid for sid, (file, _) in placed.items() if file == first):
            await store.append_node(sid, "user", "message", text("back"))
        await settle(store)
        for _ in range(200):  # the writer's maintenance removes the emptied shard
            if not (home / first).exists():
                break
            await asyncio.sleep(0.05)
        assert not (home / first).exists()
        monkeypatch.setattr(check_module, "database_facts", lambda _c, session_id: stale)
        report = await check_store(store)
        assert report.problems == []
        assert sorted(report.sessions) == sorted(sids)


async def test_check_of_a_damaged_shard_reports_it_without_a_traceback(
    home: Path, small_limits: Any
) -> None:
    """The writer's maintenance fails on the shard too; the command says so once, in its report."""
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        placed = await settle(store)
    gone = next(sid for sid in sids if placed[sid][0] != catalog.MAIN)
    shard, epoch = placed[gone]
    # A delete of an idle session: its catalog row gone, a journal row to drop its copy.
    main = connect_raw(home / "sessions.sqlite")
    with main:
        main.execute("DELETE FROM session_files WHERE session_id = ?", (gone,))
        main.execute("INSERT INTO session_moves VALUES (?, ?, ?, ?)", (gone, shard, shard, epoch))
    main.close()
    (home / shard).write_bytes(b"not a database" * 100)
    done = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "soong_store",
        "--home",
        str(home),
        "check",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await done.communicate()
    assert done.returncode == 1
    assert "unreadable_shard: " in out.decode()
    assert "Traceback" not in err.decode(), err.decode()


async def test_a_link_at_the_next_shard_name_is_never_followed(
    home: Path, tmp_path: Path, small_limits: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store, 6)
        await settle(store)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    planted = [
        name for n in range(1, 10) if not (home / (name := f"shards/{n:04d}.sqlite")).exists()
    ]
    for name in planted:  # dangling: SQLite would create the file at the target
        (home / name).symlink_to(elsewhere / name.split("/")[1])
    caplog.set_level(logging.WARNING, logger="soong_store.write.writer")
    async with SessionStore(home=home) as store:
        sids += await fill(store, 6)  # the writer wants a new shard
        deadline = time.monotonic() + 30
        while "writer maintenance failed" not in caplog.text:
            assert time.monotonic() < deadline, "the writer never tried to move a batch"
            await store.append_event(sids[-1], "mark")
            await asyncio.sleep(0.05)
        for sid in sids:
            assert len(await store.active_path(sid)) == 2
        report = await check_store(store)
    assert list(elsewhere.iterdir()) == []
    refused = next(r for r in caplog.records if r.getMessage() == "writer maintenance failed")
    assert refused.exc_info is not None and "symbolic link" in str(refused.exc_info[1])
    linked = {p.ids[0] for p in report.problems if p.kind == "shard_link"}
    assert linked == set(planted)


async def test_a_shard_replaced_by_a_link_is_refused_not_read(
    home: Path, tmp_path: Path, small_limits: Any
) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        placed = await settle(store)
    idle = next(sid for sid in sids if placed[sid][0] != catalog.MAIN)
    shard = placed[idle][0]
    moved = tmp_path / "moved.sqlite"
    (home / shard).rename(moved)
    (home / shard).symlink_to(moved)  # the same bytes, reached through a link
    async with SessionStore(home=home) as store:
        with pytest.raises(StorageError, match=f"{shard}.*symbolic link"):
            await store.active_path(idle)
        report = await check_store(store)
    found = [p for p in report.problems if p.kind == "unreadable_shard"]
    assert [p.ids for p in found] == [(shard,)]
    assert "symbolic link" in found[0].message


async def two_homes(home: Path, other: Path) -> tuple[dict[str, tuple[str, int]], list[str]]:
    """This home and another, each with shards; this one's placements and sessions."""
    async with SessionStore(home=other) as store:
        await fill(store)
        await settle(store)
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        placed = await settle(store)
    return placed, sids


def drop_home_id(path: Path) -> None:
    """Make a shard look as one made before shards named their home."""
    raw = connect_raw(path)
    with raw:
        raw.execute("DROP TABLE shard_home")
    raw.close()


@pytest.mark.parametrize("made", ["now", "before ids"])
async def test_another_homes_shard_copied_in_is_refused(
    home: Path, tmp_path: Path, small_limits: Any, made: str
) -> None:
    placed, sids = await two_homes(home, tmp_path / "other")
    idle = next(sid for sid in sids if placed[sid][0] != catalog.MAIN)
    shard = placed[idle][0]
    (home / shard).write_bytes((tmp_path / "other" / shard).read_bytes())
    if made == "before ids":
        drop_home_id(home / shard)
    async with SessionStore(home=home) as store:
        with pytest.raises(StorageError, match=f"shard file {shard} .*not this home's"):
            await store.active_path(idle)
        report = await check_store(store)
    found = [p for p in report.problems if p.kind == "unreadable_shard"]
    assert [p.ids for p in found] == [(shard,)]
    assert "not this home's" in found[0].message


async def test_a_shard_made_before_ids_is_adopted_and_named_by_the_next_move(
    home: Path,
) -> None:
    with limited(moves.Limits(hot=3, shard=5, batch=2)):
        async with SessionStore(home=home) as store:
            sids = await fill(store, 7)
            placed = await settle(store)
        shards = sorted({file for file, _ in placed.values() if file != catalog.MAIN})
        assert shards == ["shards/0001.sqlite"]  # four pairs: one more goes there
        drop_home_id(home / shards[0])
        async with SessionStore(home=home) as store:
            for sid in sids:
                assert len(await store.active_path(sid)) == 2
            assert (report := await check_store(store)).ok, report.problems
            sids += await fill(store, 4)
            await settle(store)
            assert (report := await check_store(store)).ok, report.problems
    main = connect_raw(home / "sessions.sqlite")
    ours = main.execute("SELECT home_id FROM home_identity").fetchone()[0]
    main.close()
    named = connect_raw(home / shards[0])
    assert named.execute("SELECT home_id FROM shard_home").fetchall() == [(ours,)]
    assert named.execute("SELECT count(*) FROM shard_pairs").fetchone()[0] == 5
    named.close()


async def test_a_move_never_fills_another_homes_shard(
    home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with limited(moves.Limits(hot=3, shard=5, batch=2)):
        for where in (tmp_path / "other", home):
            async with SessionStore(home=where) as store:
                await fill(store, 7)
                await settle(store)
        filling = home / "shards/0001.sqlite"  # four pairs of five: the next batch goes there
        filling.write_bytes((tmp_path / "other/shards/0001.sqlite").read_bytes())
        before = raw_layout(home)["copies"]["shards/0001.sqlite"]
        caplog.set_level(logging.WARNING, logger="soong_store.write.writer")
        async with SessionStore(home=home) as store:
            sids = await fill(store, 3)
            deadline = time.monotonic() + 30
            while "writer maintenance failed" not in caplog.text:
                assert time.monotonic() < deadline, "the writer never tried to move a batch"
                await store.append_event(sids[-1], "mark")
                await asyncio.sleep(0.05)
            for sid in sids:
                assert len(await store.active_path(sid)) == 2
    refused = next(r for r in caplog.records if r.getMessage() == "writer maintenance failed")
    assert refused.exc_info is not None
    assert "shards/0001.sqlite is not this home's" in str(refused.exc_info[1])
    assert raw_layout(home)["copies"]["shards/0001.sqlite"] == before


async def test_a_home_from_before_ids_upgrades_and_reads_its_shards(
    home: Path, small_limits: Any
) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        placed = await settle(store)
    shards = sorted({file for file, _ in placed.values() if file != catalog.MAIN})
    main = connect_raw(home / "sessions.sqlite")
    with main:  # the home as revision 0006 left it
        main.execute("DROP TABLE home_identity")
        main.execute("DROP TABLE keyed_states")
        main.execute("DROP TABLE run_usage")
        undo_owner_revision(main)
        main.execute("UPDATE alembic_version SET version_num = '0006'")
    main.close()
    for shard in shards:
        drop_home_id(home / shard)
        raw = connect_raw(home / shard)
        with raw:
            raw.execute("UPDATE shard_revision SET revision = '0006'")
        raw.close()
    async with SessionStore(home=home) as store:
        for sid in sids:
            assert len(await store.active_path(sid)) == 2
        assert (report := await check_store(store)).ok, report.problems


def _page_size(path: Path) -> int:
    connection = connect_raw(path)
    try:
        return int(connection.execute("PRAGMA page_size").fetchone()[0])
    finally:
        connection.close()


async def test_shards_are_made_with_small_pages_and_old_ones_keep_theirs(
    home: Path, small_limits: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new shard file has 1 KB pages (an idle pair's seven b-trees take a page each); a shard
    made with another size (an older store's) keeps it, and pairs still move into it and read
    back the same."""
    monkeypatch.setattr(sqlite_files, "SHARD_PAGE_SIZE", 4096)
    async with SessionStore(home=home) as store:
        first = await fill(store, 5)  # two idle pairs: one shard, with room for two more
        placed = await settle(store)
    old = {file for file, _ in placed.values() if file != catalog.MAIN}
    assert len(old) == 1 and _page_size(home / next(iter(old))) == 4096
    monkeypatch.setattr(sqlite_files, "SHARD_PAGE_SIZE", 1024)
    async with SessionStore(home=home) as store:
        later = await fill(store, 8)
        before = {sid: await reads_of(store, sid) for sid in first + later}
        placed = await settle(store)
    files = {file for file, _ in placed.values() if file != catalog.MAIN}
    assert sum(placed[sid][0] in old for sid in first + later) == 4  # the old shard filled up
    assert {f: _page_size(home / f) for f in files - old} == dict.fromkeys(files - old, 1024)
    assert files - old and _page_size(home / next(iter(old))) == 4096
    async with SessionStore(home=home) as again:
        for sid in first + later:
            assert await reads_of(again, sid) == before[sid]
        assert (await check_store(again)).ok
