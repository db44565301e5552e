"""The connection an archive writes its shard through is kept from one batch to the next.

Opening it (an engine, the main file attached, the shard's schema read) cost most of a batch,
so the writer's maintenance keeps it while batches go to the same shard, and closes it when the
shard is full, after a failed batch, and with the store. These tests count the engines opened
on shard files and look at the process's open files, so they live with the SQLite tests.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from soong_store import SessionStore
from soong_store.backends.sqlite.backend import SQLiteBackend
from soong_store.catalog import lookup as catalog
from soong_store.catalog import moves
from tests.conftest import text
from tests.shard_support import assert_each_pair_in_one_file, limited, settle

pytestmark = pytest.mark.sqlite


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The shard file of every engine opened for an archive, in order."""
    files: list[str] = []
    original = SQLiteBackend.file_engine

    def counting(self: SQLiteBackend, file: str, main_as: str) -> Engine:
        files.append(file)
        return original(self, file, main_as)

    monkeypatch.setattr(SQLiteBackend, "file_engine", counting)
    return files


@pytest.fixture
def failing_once() -> Iterator[list[str]]:
    """A step hook that fails the first archive inside T1, after its first pair was copied."""
    failed: list[str] = []

    def hook(step: str) -> None:
        if step == "archive:T1 copied" and not failed:
            failed.append(step)
            raise RuntimeError("injected failure inside T1")

    moves.step_hook = hook
    try:
        yield failed
    finally:
        moves.step_hook = None


async def fill(
    store: SessionStore, sessions: int, *, settle_each: bool = True
) -> dict[str, list[str]]:
    """Sessions of two nodes each (moves settled after each one); each session's node ids."""
    made: dict[str, list[str]] = {}
    for i in range(sessions):
        sid = (await store.create_session(cwd="/p")).session_id
        async with store.transaction(sid) as tx:
            ids = [
                tx.add_node("user", "message", text(f"q{i}")),
                tx.add_node("assistant", "message", text(f"a{i}")),
            ]
        made[sid] = ids
        if settle_each:
            await settle(store)
    return made


def open_under(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            found.append(target)
    return found


async def test_batches_into_one_shard_share_one_connection(home: Path, opened: list[str]) -> None:
    with limited(moves.Limits(hot=3, shard=8, batch=2)):
        async with SessionStore(home=home) as store:
            await fill(store, 9)
            placed = await settle(store)
    in_shard = [sid for sid, (file, _) in placed.items() if file == "shards/0001.sqlite"]
    assert len(in_shard) == 6  # three batches of two
    assert opened == ["shards/0001.sqlite"]


async def test_a_full_shard_lets_its_connection_go_and_the_next_shard_gets_one(
    home: Path, opened: list[str]
) -> None:
    with limited(moves.Limits(hot=3, shard=4, batch=2)):
        async with SessionStore(home=home) as store:
            await fill(store, 10)
            placed = await settle(store)
    files = sorted({file for file, _ in placed.values() if file != catalog.MAIN})
    assert files == ["shards/0001.sqlite", "shards/0002.sqlite"]
    assert opened == files


async def test_closing_the_store_closes_the_shard_connection(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept: list[moves.Maintenance] = []  # alive past the close: the close must not rely on gc

    class Kept(moves.Maintenance):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            kept.append(self)

    monkeypatch.setattr(moves, "Maintenance", Kept)  # the runtime imports it at the first write
    with limited(moves.Limits(hot=3, shard=8, batch=2)):
        async with SessionStore(home=home) as store:
            await fill(store, 6)
            await settle(store)
        assert (home / "shards" / "0001.sqlite").is_file()
        assert len(kept) == 1
        assert open_under(home) == []


async def test_after_a_failed_batch_the_next_one_works_and_nothing_is_lost(
    home: Path, opened: list[str], failing_once: list[str]
) -> None:
    with limited(moves.Limits(hot=3, shard=8, batch=2)):
        async with SessionStore(home=home) as store:
            made = await fill(store, 4, settle_each=False)  # the fourth pair: the first archive
            for _ in range(3000):
                if failing_once:
                    break
                await asyncio.sleep(0.01)
            assert failing_once == ["archive:T1 copied"]
            newest = list(made)[-1]
            await store.append_node(newest, "user", "message", text("again"))  # a pair not new
            placed = await settle(store)
            for sid, ids in made.items():
                assert [n.node_id for n in await store.active_path(sid)][:2] == ids
    assert sum(1 for file, _ in placed.values() if file == "shards/0001.sqlite") == 2
    assert opened == ["shards/0001.sqlite", "shards/0001.sqlite"]  # a new one after the failure
    assert_each_pair_in_one_file(home)
