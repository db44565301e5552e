"""The path cache takes the nodes a unit of work committed, so that the next read climbs for none.

SQLite-only, as ``test_path_cache.py``: the cache is checked by ``PRAGMA data_version``. A cache
of the test's own is read through the store's reader threads (``run_read``), so that the test
sees exactly what it was told and what it had to read.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

from soong_store import JsonBlock, SessionStore, TextBlock
from soong_store.files.artifact_op import SpillPolicy
from soong_store.model.records import ContextView, NodeRecord
from soong_store.read import session_reads as reads
from soong_store.read.path_cache import PathCache
from soong_store.read.readers import SMALL_ROWS
from soong_store.store import run_read, runtime_of
from soong_store.write.unit_of_work import Committed, UnitOfWork
from tests.conftest import text
from tests.read.test_path_cache import Climbs, other_process, session_of

pytestmark = [pytest.mark.sqlite, pytest.mark.asyncio]


def cached_context(store: SessionStore, paths: PathCache, sid: str) -> Any:
    return run_read(store, partial(paths.context, session_id=sid, node_id=None, limit=None))


async def fresh_context(store: SessionStore, sid: str, climbs: Climbs | None = None) -> Any:
    """What a read without the cache returns (its climb is not counted in ``climbs``)."""
    view = await run_read(store, partial(reads.context, session_id=sid, node_id=None, limit=None))
    if climbs is not None:
        climbs.take()
    return view


def same_view(cached: ContextView, fresh: ContextView) -> None:
    assert cached.token_count == fresh.token_count
    assert [n.model_dump() for n in cached.nodes] == [n.model_dump() for n in fresh.nodes]


async def test_written_nodes_are_read_without_a_climb_and_as_a_fresh_read_returns_them(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, _ids = await session_of(store, 50)
    paths = PathCache()
    climbs = Climbs(monkeypatch)
    await cached_context(store, paths, sid)
    assert climbs.take() == [(None, 50)]
    for i in range(3):
        node = await store.append_node(
            sid, "assistant", "message", text(f"new {i}"), metadata="plain", token_count=2
        )
        paths.written(sid, [node])
        view = await cached_context(store, paths, sid)
        assert climbs.take() == []
        same_view(view, await fresh_context(store, sid, climbs))
        assert view.nodes[-1].node_id == node.node_id and view.token_count == 50 + 2 * (i + 1)


async def test_a_unit_of_several_nodes_and_a_new_branch_need_no_climb(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, ids = await session_of(store, 30)
    paths = PathCache()
    climbs = Climbs(monkeypatch)
    await cached_context(store, paths, sid)
    climbs.take()
    async with store.transaction(sid) as tx:
        for i in range(3):
            tx.add_node("assistant", "message", text(f"unit {i}"))
    paths.written(sid, tx.nodes)
    same_view(await cached_context(store, paths, sid), await fresh_context(store, sid, climbs))
    branch = await store.append_node(sid, "user", "message", text("edit"), parent_id=ids[9])
    paths.written(sid, [branch])
    view = await cached_context(store, paths, sid)
    assert climbs.take() == []
    assert [n.node_id for n in view.nodes] == [*ids[:10], branch.node_id]
    same_view(view, await fresh_context(store, sid, climbs))


async def test_a_written_node_holding_dicts_is_held_as_a_read_only_copy(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, _ids = await session_of(store, 20)
    paths = PathCache()
    climbs = Climbs(monkeypatch)
    await cached_context(store, paths, sid)
    climbs.take()
    data = {"rows": [1, 2]}
    metadata = {"tags": ["a"]}
    node = await store.append_node(
        sid, "tool", "message", [{"type": "json", "data": data}], metadata=metadata
    )
    paths.written(sid, [node])
    data["rows"].append(3)  # the caller's own values, and the record it got, change after
    metadata["tags"].append("b")
    node.content.append(TextBlock(text="changed"))
    node.metadata["tags"].append("c")
    view = await cached_context(store, paths, sid)
    assert climbs.take() == []
    assert view.nodes[-1].content == [JsonBlock(data={"rows": [1, 2]})]
    assert view.nodes[-1].metadata == {"tags": ["a"]}
    same_view(view, await fresh_context(store, sid, climbs))


async def test_a_session_not_read_lately_takes_nothing_from_writes(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, ids = await session_of(store, 10)
    paths = PathCache()
    node = await store.append_node(sid, "assistant", "message", text("unread"))
    paths.written(sid, [node])
    climbs = Climbs(monkeypatch)
    view = await cached_context(store, paths, sid)
    assert climbs.take() == [(None, 11)]  # the whole path, as for any first read
    assert [n.node_id for n in view.nodes] == [*ids, node.node_id]
    paths.forget(sid)
    later = await store.append_node(sid, "user", "message", text("forgotten"))
    paths.written(sid, [later])  # forgotten sessions are not brought back by a write
    await cached_context(store, paths, sid)
    assert climbs.take() == [(None, 12)]


async def test_a_write_taken_in_does_not_hide_another_process_moving_the_session(
    home: Path, store: SessionStore
) -> None:
    sid, ids = await session_of(store, 10)
    paths = PathCache()
    await cached_context(store, paths, sid)
    node = await store.append_node(sid, "assistant", "message", text("ours"))
    paths.written(sid, [node])
    theirs = other_process(
        home,
        """
        node = await store.append_node(argv[0], "user", "message", [{"type": "text", "text": "x"}])
        print(node.node_id)
        """,
        sid,
    )
    view = await cached_context(store, paths, sid)
    assert [n.node_id for n in view.nodes] == [*ids, node.node_id, theirs]
    same_view(view, await fresh_context(store, sid))


async def test_a_unit_of_work_tells_what_it_committed_and_only_then(store: SessionStore) -> None:
    sid, ids = await session_of(store, 3)
    told: list[Committed] = []

    def unit() -> UnitOfWork:
        return UnitOfWork(sid, runtime_of(store), SpillPolicy(), on_commit=told.append)

    tx = unit()
    node_id = tx.add_node("assistant", "message", text("told"))
    await tx.commit()
    assert len(told) == 1 and [n.node_id for n in told[0].nodes] == [node_id]
    assert told[0].nodes == tx.nodes and told[0].events == tx.events

    failing = unit()
    failing.add_node("assistant", "message", text("orphan"), parent_id="node_" + "0" * 26)
    with pytest.raises(Exception, match="no node"):
        await failing.commit()
    discarded = unit()
    discarded.add_node("assistant", "message", text("dropped"))
    discarded.discard()
    assert len(told) == 1
    assert isinstance(told[0].nodes[0], NodeRecord) and ids


async def test_the_store_s_own_cache_takes_what_its_units_commit(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, _ids = await session_of(store, 40)
    climbs = Climbs(monkeypatch)
    await store.context(sid)
    assert climbs.take() == [(SMALL_ROWS, 40)]  # on the loop: bounded by its budget
    node = await store.append_node(sid, "assistant", "message", text("after"), token_count=3)
    view = await store.context(sid)
    assert climbs.take() == []
    assert view.nodes[-1].node_id == node.node_id and view.token_count == 43
    same_view(view, await fresh_context(store, sid))
