"""``check`` of a whole home reads many sessions per read job, and compares shards' revisions.

SQLite-only: the damage is made behind the store's back in ``sessions.sqlite`` and in shard files
(with the shard tests' small limits, :mod:`tests.shard_support`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.catalog import lookup as catalog
from soong_store.check import run as check_module
from soong_store.check.run import Problem, check_store
from soong_store.schema import session_tables
from soong_store.store import runtime_of
from tests.conftest import connect_raw, text
from tests.shard_support import limited, settle

pytestmark = pytest.mark.sqlite


@pytest.fixture
def small_limits() -> Iterator[Any]:
    with limited() as limits:
        yield limits


async def fill(store: SessionStore, sessions: int) -> list[str]:
    sids = []
    for i in range(sessions):
        sid = (await store.create_session(cwd="/p")).session_id
        root = await store.append_node(sid, "user", "message", text(f"q{i}"))
        await store.append_node(sid, "assistant", "message", text(f"a{i}"), parent_id=root.node_id)
        sids.append(sid)
    return sids


def counted_reads(store: SessionStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one for every read job ``store`` runs from now on."""
    runtime = runtime_of(store)
    plain: Callable[[Any], Awaitable[Any]] = runtime.read
    seen: list[int] = []

    async def read(query: Any) -> Any:
        seen.append(1)
        return await plain(query)

    monkeypatch.setattr(runtime, "read", read)
    return seen


async def test_a_whole_check_reads_many_sessions_per_read_job(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store, 30)
        reads = counted_reads(store, monkeypatch)
        seen: list[tuple[int, int]] = []
        report = await check_store(store, progress=lambda done, total: seen.append((done, total)))
    assert report.ok and report.sessions == sorted(sids)
    assert len(reads) < 10  # three or more a session before
    assert seen == [(done, 30) for done in range(1, 31)]


def damage(home: Path, sids: list[str]) -> None:
    """A missing event in one session, a search row of a node that is gone in another."""
    con = connect_raw(home / "sessions.sqlite")
    with con:
        con.execute(f"DELETE FROM {session_tables.events_table_name(sids[1])} WHERE seq = 2")
        first = "SELECT min(doc_id) FROM search_text WHERE session_id = ?"
        con.execute(
            f"UPDATE search_text SET node_id = 'node_gone' WHERE doc_id = ({first})", sids[4:5]
        )
    con.close()


def kinds(problems: list[Problem]) -> Counter[tuple[str, str | None, tuple[str, ...]]]:
    return Counter((p.kind, p.session_id, p.ids) for p in problems)


async def test_batches_find_what_a_check_of_each_session_finds(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store, 7)
    damage(home, sids)
    async with SessionStore(home=home) as store:
        whole = await check_store(store)
        monkeypatch.setattr(check_module, "BATCH", 2)
        small = await check_store(store)
        each = [p for sid in sids for p in (await check_store(store, sid)).problems]
    assert {p.kind for p in whole.problems} == {"node_without_event", "seq", "search_index"}
    assert small.problems == whole.problems
    assert kinds(each) == kinds(whole.problems)


def set_revision(path: Path, revision: str | None) -> None:
    con = connect_raw(path)
    with con:
        con.execute("DELETE FROM shard_revision")
        if revision is not None:
            con.execute("INSERT INTO shard_revision VALUES (?)", (revision,))
    con.close()


async def test_a_shard_at_another_revision_than_the_database_is_reported(
    home: Path, small_limits: Any
) -> None:
    async with SessionStore(home=home) as store:
        sids = await fill(store, 10)
        placed = await settle(store)
    idle = sorted(sid for sid in sids if placed[sid][0] != catalog.MAIN)
    shard = placed[idle[0]][0]
    # What an upgrade_pairs cut short leaves: the shards it did hold the new revision, while the
    # revision's transaction of the main database rolled back.
    set_revision(home / shard, "ztest_newer")
    async with SessionStore(home=home) as store:
        whole = await check_store(store)
        one = await check_store(store, idle[0])
    expected = [("shard_revision", None, (shard,))]
    assert [(p.kind, p.session_id, p.ids) for p in whole.problems] == expected
    assert [(p.kind, p.session_id, p.ids) for p in one.problems] == expected
    assert "ztest_newer" in whole.problems[0].message
    set_revision(home / shard, None)  # a shard from before revisions were kept: nothing to compare
    async with SessionStore(home=home) as store:
        assert (await check_store(store)).ok
    # made before a later revision that changed no pair (0007, the home's id): the same shape
    set_revision(home / shard, "0006")
    async with SessionStore(home=home) as store:
        assert (report := await check_store(store)).ok, report.problems
