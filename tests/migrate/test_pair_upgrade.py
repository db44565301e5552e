"""A revision that changes every session's tables reaches the pairs in the main file and shards.

A test-only revision (written to a folder of the test's own, beside ``migrations/versions``) adds a
``flags`` column to every ``nodes_`` table with :func:`soong_store.migrate.upgrade.upgrade_pairs`.
With the hot bound at 3 and shards of 4 (:mod:`tests.shard_support`), ten sessions put pairs in
``sessions.sqlite`` and in three shards. These tests read the files behind the store's back.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

import soong_store
from soong_store import InvalidArgument, SchemaVersionError, SessionStore, StorageError, cli
from soong_store.backends.sqlite.alter import rewrite_add_column
from soong_store.backends.sqlite.backend import make_engine
from soong_store.catalog import moves
from soong_store.check.run import check_store
from soong_store.migrate.pairs import stored_session_ids
from soong_store.migrate.upgrade import add_column, current_revision
from soong_store.schema import session_tables
from tests.conftest import connect_raw, text
from tests.pair_revision import install_revision, use_newest_factory
from tests.shard_support import assert_each_pair_in_one_file, limited, raw_layout, settle

pytestmark = pytest.mark.sqlite


async def fill(store: SessionStore, sessions: int = 10) -> list[str]:
    sids = []
    for i in range(sessions):
        sid = (await store.create_session(cwd="/p")).session_id
        root = await store.append_node(sid, "user", "message", text(f"q{i}"))
        await store.append_node(sid, "assistant", "message", text(f"a{i}"), parent_id=root.node_id)
        sids.append(sid)
    return sids


def files_of(home: Path) -> list[Path]:
    return [home / "sessions.sqlite", *sorted((home / "shards").glob("*.sqlite"))]


def nodes_columns(path: Path) -> dict[str, list[str]]:
    """Every nodes table of a file and its columns."""
    con = connect_raw(path)
    try:
        names = [
            r[0]
            for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'nodes%'"
            )
        ]
        return {n: [c[1] for c in con.execute(f'PRAGMA table_info("{n}")')] for n in names}
    finally:
        con.close()


def recorded_revision(path: Path) -> str | None:
    con = connect_raw(path)
    try:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'shard_revision'").fetchone():
            return None
        return str(con.execute("SELECT revision FROM shard_revision").fetchone()[0])
    finally:
        con.close()


def shapes(home: Path) -> dict[str, set[bool]]:
    """Per file: whether its nodes tables have ``flags`` (one value per file: one shape)."""
    return {
        path.name: {"flags" in cols for cols in nodes_columns(path).values()}
        for path in files_of(home)
    }


async def home_with_shards(home: Path) -> list[str]:
    async with SessionStore(home=home) as store:
        sids = await fill(store)
        await settle(store)
    assert len(list((home / "shards").glob("*.sqlite"))) >= 2
    assert all(nodes_columns(path) for path in files_of(home))
    return sids


async def paths_of(store: SessionStore, sids: list[str]) -> dict[str, list[str]]:
    return {sid: [n.node_id for n in await store.active_path(sid)] for sid in sids}


async def test_revision_reaches_pairs_in_the_hot_file_and_in_every_shard(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with limited():
        sids = await home_with_shards(home)
        flags_revision = install_revision(tmp_path, monkeypatch)
        soong_store.upgrade(f"sqlite:///{home / 'sessions.sqlite'}")
        use_newest_factory(monkeypatch)
        assert current_revision(f"sqlite:///{home / 'sessions.sqlite'}") == flags_revision
        assert shapes(home) == {path.name: {True} for path in files_of(home)}
        for shard in files_of(home)[1:]:
            assert recorded_revision(shard) == flags_revision
        async with SessionStore(home=home) as store:
            assert all(len(path) == 2 for path in (await paths_of(store, sids)).values())
            assert (report := await check_store(store)).ok, report.problems


async def test_pairs_moved_after_the_upgrade_keep_the_new_column(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with limited():
        sids = await home_with_shards(home)
        flags_revision = install_revision(tmp_path, monkeypatch)
        soong_store.upgrade(f"sqlite:///{home / 'sessions.sqlite'}")
        use_newest_factory(monkeypatch)
        shards_before = {p.name for p in files_of(home)[1:]}
        async with SessionStore(home=home) as store:
            for sid in sids[:4]:  # the oldest: back from their shards, then out again
                await store.append_node(sid, "user", "message", text("again"))
            sids += await fill(store, 6)
            await settle(store)
            paths = await paths_of(store, sids)
            assert (report := await check_store(store)).ok, report.problems
        assert {p.name for p in files_of(home)[1:]} - shards_before  # made after the upgrade
        assert all(shape <= {True} for shape in shapes(home).values())
        assert sum(len(nodes_columns(path)) for path in files_of(home)) == len(sids)
        for shard in files_of(home)[1:]:  # created after the upgrade: at the revision
            assert recorded_revision(shard) == flags_revision
        assert_each_pair_in_one_file(home)
        assert all(len(path) == (3 if sid in sids[:4] else 2) for sid, path in paths.items())


async def test_a_failure_part_way_leaves_each_file_in_one_shape_and_upgrade_finishes(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{home / 'sessions.sqlite'}"
    with limited():
        await home_with_shards(home)
        flags_revision = install_revision(tmp_path, monkeypatch)
        before = current_revision(url)
        monkeypatch.setenv("ZTEST_FAIL_AT_FILE", "3")  # the main file, the first shard, then this
        with pytest.raises(StorageError, match="failed at file 3"):
            soong_store.upgrade(url)
        assert current_revision(url) == before
        main, first, *rest = files_of(home)
        assert shapes(home) == {
            main.name: {False},
            first.name: {True},
            **{p.name: {False} for p in rest},
        }
        # shards record the revision they were filled at: an ancestor, so the next run redoes them
        assert [recorded_revision(p) for p in [first, *rest]] == [flags_revision] + [before] * len(
            rest
        )
        monkeypatch.delenv("ZTEST_FAIL_AT_FILE")
        use_newest_factory(monkeypatch)
        soong_store.upgrade(url)  # the first shard is not changed twice (a second ADD fails)
        assert current_revision(url) == flags_revision
        assert shapes(home) == {path.name: {True} for path in files_of(home)}
        async with SessionStore(home=home) as store:
            assert (report := await check_store(store)).ok, report.problems
        assert_each_pair_in_one_file(home)


def make_pairs(path: Path, sessions: int) -> list[str]:
    engine = make_engine(f"sqlite:///{path}", "admin")
    sids = [f"sess_20260101_000000_{i:04x}" for i in range(sessions)]
    try:
        with engine.connect() as connection, connection.begin():
            for sid in sids:
                tables = session_tables.session_tables(sid)
                tables.create(connection)
                connection.execute(
                    tables.nodes.insert(),
                    {
                        "node_id": f"n_{sid}",
                        "node_seq": 1,
                        "agent_id": "agent_1",
                        "role": "user",
                        "node_type": "message",
                        "content_json": "[]",
                        "created_at": "2026-01-01T00:00:00.000000+00:00",
                    },
                )
    finally:
        engine.dispose()
    return sids


def schema_rows(path: Path) -> list[tuple[Any, ...]]:
    con = connect_raw(path)
    try:
        return con.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"
        ).fetchall()
    finally:
        con.close()


def test_the_rewrite_writes_what_alter_table_writes(tmp_path: Path) -> None:
    rewritten, altered = tmp_path / "rewritten.sqlite", tmp_path / "altered.sqlite"
    sids = make_pairs(rewritten, 5)
    shutil.copyfile(rewritten, altered)
    engine = make_engine(f"sqlite:///{rewritten}", "admin")
    try:
        with engine.connect() as connection, connection.begin():
            found = stored_session_ids(connection)
            rewrite_add_column(connection, {f"nodes_{s}" for s in found}, '"flags" INTEGER')
            # the connection's own schema is the new one before its commit
            connection.exec_driver_sql(f'SELECT flags FROM "nodes_{sids[0]}"').all()
    finally:
        engine.dispose()
    con = connect_raw(altered)
    try:
        for sid in sids:
            con.execute(f'ALTER TABLE "nodes_{sid}" ADD COLUMN "flags" INTEGER')
        con.commit()
    finally:
        con.close()
    assert found == sids
    assert schema_rows(rewritten) == schema_rows(altered)
    assert rewritten.read_bytes()[44:48] == altered.read_bytes()[44:48] == b"\x00\x00\x00\x04"
    con = connect_raw(rewritten)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert con.execute(f'SELECT node_id, flags FROM "nodes_{sids[1]}"').fetchall() == [
            (f"n_{sids[1]}", None)
        ]
    finally:
        con.close()


@pytest.mark.parametrize(
    ("kind", "column", "type_"),
    [
        ("agents", "flags", "INTEGER"),
        ("nodes", "Flags; DROP", "INTEGER"),
        ("nodes", "flags", "INTEGER NOT NULL"),
    ],
)
def test_add_column_refuses_what_it_cannot_add_safely(kind: Any, column: str, type_: str) -> None:
    with pytest.raises(InvalidArgument, match="not"):
        add_column(kind, column, type_)


async def test_cli_upgrade_prints_each_shard_on_stderr(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with limited():
        await home_with_shards(home)
        revision = install_revision(tmp_path, monkeypatch)
        shards = len(files_of(home)) - 1
        capsys.readouterr()
        assert await asyncio.to_thread(cli.main, ["--home", str(home), "upgrade"]) == 0
    captured = capsys.readouterr()
    assert f"to {revision}" in captured.out
    lines = [line for line in captured.err.splitlines() if "shard" in line]
    assert [line.split(": shard ")[1].split(" (")[0] for line in lines] == [
        f"{n} of {shards}" for n in range(1, shards + 1)
    ]
    assert all("changed" in line for line in lines)
    assert "Context impl" not in captured.err


async def test_a_shard_past_the_main_file_keeps_older_code_out_until_the_upgrade_ends(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{home / 'sessions.sqlite'}"
    with limited():
        sids = await home_with_shards(home)
        newer = pytest.MonkeyPatch()
        flags_revision = install_revision(tmp_path, newer)
        newer.setenv("ZTEST_FAIL_AT_FILE", "3")  # the first shard committed, the main file not
        with pytest.raises(StorageError, match="failed at file 3"):
            soong_store.upgrade(url)
        newer.undo()  # the code that stops at the main file's revision
        first = files_of(home)[1]
        assert recorded_revision(first) == flags_revision
        with pytest.raises(SchemaVersionError, match=f"shards/{first.name}") as refused:
            async with SessionStore(home=home):
                pass
        assert flags_revision in str(refused.value)
        later = tmp_path / "later"
        later.mkdir()
        install_revision(later, monkeypatch)
        use_newest_factory(monkeypatch)
        soong_store.upgrade(url)  # the newer code's upgrade finishes
        async with SessionStore(home=home) as store:
            assert all(len(path) == 2 for path in (await paths_of(store, sids)).values())
            assert (report := await check_store(store)).ok, report.problems
        assert current_revision(url) == flags_revision
        assert shapes(home) == {path.name: {True} for path in files_of(home)}


async def test_a_move_never_fills_a_shard_of_another_shape(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A shard changed by a newer version's upgrade while this store is open takes no pair."""
    with limited(moves.Limits(hot=3, shard=5, batch=2)) as limits:
        async with SessionStore(home=home) as store:
            sids = await fill(store, 7)
            await settle(store)
        filling = files_of(home)[-1]
        assert len(raw_layout(home)["copies"][f"shards/{filling.name}"]) < limits.shard
        con = connect_raw(filling)
        with con:
            con.execute("UPDATE shard_revision SET revision = 'ztest_newer'")
        con.close()
        held = set(raw_layout(home)["copies"][f"shards/{filling.name}"])
        caplog.set_level(logging.WARNING, logger="soong_store.write.writer")
        async with SessionStore(home=home) as store:
            sids += await fill(store, 3)  # the hot bound passed: the writer moves a batch
            deadline = time.monotonic() + 30
            while "writer maintenance failed" not in caplog.text:
                assert time.monotonic() < deadline, "the writer never tried to move a batch"
                await store.append_node(sids[-1], "user", "message", text("more"))
                await asyncio.sleep(0.05)
            assert all(len(path) >= 2 for path in (await paths_of(store, sids)).values())
        refused = [r for r in caplog.records if r.getMessage() == "writer maintenance failed"]
        assert refused[0].exc_info is not None
        assert isinstance(refused[0].exc_info[1], SchemaVersionError)
        assert f"shards/{filling.name}" in str(refused[0].exc_info[1])
        assert set(raw_layout(home)["copies"][f"shards/{filling.name}"]) == held
        assert_each_pair_in_one_file(home)
