"""``active_path`` and ``context`` with ``limit=``: the tail of the path, read from the leaf up."""

from __future__ import annotations

import pytest

from soong_store import InvalidArgument, NotFound, SessionStore, StorageError
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import execute, nodes_table, snapshot

pytestmark = pytest.mark.asyncio

HUGE = 2**70


async def chain(store: SessionStore, depth: int, side_every: int = 0) -> tuple[str, list[str]]:
    """A session whose active path has ``depth`` nodes (tokens 1..depth), with side branches."""
    sid = (await store.create_session(cwd=".")).session_id
    ids: list[str] = []
    async with store.transaction(sid) as tx:
        for i in range(depth):
            role = "user" if i % 2 == 0 else "assistant"
            parent = ids[-1] if ids else None
            ids.append(
                tx.add_node(role, "message", text(f"n{i}"), token_count=i + 1, parent_id=parent)
            )
            if side_every and i % side_every == 0 and i > 0:
                tx.add_node("user", "message", text(f"side {i}"), parent_id=ids[i - 1])
                tx.add_event("note", payload={"i": i})
    await store.switch_node(sid, ids[-1])
    return sid, ids


@pytest.mark.parametrize("depth", [3, 400])
async def test_limit_returns_the_last_nodes_root_most_first(store: SessionStore, depth: int):
    sid, ids = await chain(store, depth, side_every=7)
    whole = await store.active_path(sid)
    assert [n.node_id for n in whole] == ids
    for limit in (1, 2, depth - 1, depth, depth + 5, HUGE):
        path = await store.active_path(sid, limit=limit)
        assert [n.node_id for n in path] == ids[-limit:]
        assert path == whole[-limit:]
        view = await store.context(sid, limit=limit)
        assert view.nodes == whole[-limit:]
        assert view.token_count == sum(n.token_count or 0 for n in whole[-limit:])


async def test_limit_zero_is_empty_but_still_checks_the_node(store: SessionStore):
    sid, ids = await chain(store, 5)
    assert await store.active_path(sid, limit=0) == []
    view = await store.context(sid, ids[2], limit=0)
    assert view.nodes == [] and view.token_count == 0
    with pytest.raises(NotFound, match="node_nope"):
        await store.active_path(sid, "node_nope", limit=0)
    with pytest.raises(NotFound, match="node_nope"):
        await store.context(sid, "node_nope", limit=0)


async def test_limit_from_a_given_node(store: SessionStore):
    sid, ids = await chain(store, 30)
    path = await store.active_path(sid, ids[9], limit=4)
    assert [n.node_id for n in path] == ids[6:10]
    view = await store.context(sid, ids[9], limit=4)
    assert [n.node_id for n in view.nodes] == ids[6:10]
    assert view.token_count == 7 + 8 + 9 + 10


async def test_limit_of_an_empty_path(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    assert await store.active_path(sid, limit=3) == []
    view = await store.context(sid, limit=3)
    assert view.nodes == [] and view.token_count == 0


async def test_context_limit_applies_to_the_cut_path(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    for i in range(5):
        await store.append_node(sid, "user", "message", text(f"old {i}"), token_count=100)
    cut = await store.append_node(sid, "system", "compaction", text("sum"), token_count=5)
    after = [
        await store.append_node(sid, "user", "message", text(f"new {i}"), token_count=i + 1)
        for i in range(4)
    ]
    short = await store.context(sid, limit=2)
    assert [n.node_id for n in short.nodes] == [n.node_id for n in after[-2:]]
    assert short.token_count == 3 + 4
    exact = await store.context(sid, limit=5)
    assert [n.node_id for n in exact.nodes] == [cut.node_id] + [n.node_id for n in after]
    assert exact.token_count == 5 + 1 + 2 + 3 + 4
    wide = await store.context(sid, limit=50)
    assert wide == exact == await store.context(sid)
    assert len(await store.active_path(sid, limit=50)) == 10


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3", [2]])
async def test_a_bad_limit_is_refused(store: SessionStore, backend: Backend, bad: object):
    sid, _ = await chain(store, 3)
    before = snapshot(backend)
    with pytest.raises(InvalidArgument, match="limit"):
        await store.active_path(sid, limit=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="limit"):
        await store.context(sid, limit=bad)  # type: ignore[arg-type]
    assert snapshot(backend) == before


async def test_a_limited_read_does_not_read_above_its_tail(store: SessionStore, backend: Backend):
    sid, ids = await chain(store, 20)
    execute(  # damage far above the tail: node 3 names a parent that is not there
        backend,
        f'UPDATE "{nodes_table(sid)}" SET parent_id = :parent WHERE node_id = :node',
        {"parent": "node_gone", "node": ids[3]},
    )
    assert [n.node_id for n in await store.active_path(sid, limit=5)] == ids[-5:]
    assert [n.node_id for n in (await store.context(sid, limit=17)).nodes] == ids[3:]
    with pytest.raises(StorageError, match="parent chain"):
        await store.active_path(sid, limit=18)
    with pytest.raises(StorageError, match="parent chain"):
        await store.context(sid)
