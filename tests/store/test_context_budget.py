"""``context(max_tokens=)``: the newest part of the cut path that fits a token budget.

The rules (DESIGN §18): the result is the longest tail of the cut path whose token total fits,
root-most first; it never starts inside a tool exchange (a result whose call it leaves out); the
compaction node heading a cut path is kept and counted, and ``BudgetError`` says when it alone
does not fit; a node without a ``token_count`` counts ceil(bytes of its content JSON / 4).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from soong_store import BudgetError, InvalidArgument, NotFound, SessionStore
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import execute, nodes_table, snapshot

pytestmark = pytest.mark.asyncio


def call(*ids: str) -> list[dict[str, Any]]:
    return [
        {"type": "tool_call", "tool_call_id": i, "name": "ls", "arguments": {"i": i}} for i in ids
    ]


def result(*ids: str) -> list[dict[str, Any]]:
    return [
        {"type": "tool_result", "tool_call_id": i, "content": [{"type": "text", "text": "ok"}]}
        for i in ids
    ]


async def linear(store: SessionStore, tokens: list[int]) -> tuple[str, list[str]]:
    """A session whose active path is user/assistant messages of these token counts."""
    sid = (await store.create_session(cwd=".")).session_id
    ids = []
    for i, count in enumerate(tokens):
        role = "user" if i % 2 == 0 else "assistant"
        node = await store.append_node(sid, role, "message", text(f"n{i}"), token_count=count)
        ids.append(node.node_id)
    return sid, ids


def ids_of(view: Any) -> list[str]:
    return [n.node_id for n in view.nodes]


async def test_the_newest_part_that_fits(store: SessionStore):
    sid, ids = await linear(store, [5, 4, 3, 2, 1])
    whole = await store.context(sid)
    assert (await store.context(sid, max_tokens=15)) == whole
    assert whole.omitted == 0 and whole.token_count == 15 and not whole.estimated
    for budget, start in [(14, 1), (10, 1), (9, 2), (6, 2), (5, 3), (3, 3), (2, 4), (1, 4)]:
        view = await store.context(sid, max_tokens=budget)
        assert ids_of(view) == ids[start:], budget
        assert view.token_count == sum([5, 4, 3, 2, 1][start:]) <= budget
        assert view.omitted == start and not view.estimated
    nothing = await store.context(sid, max_tokens=0)
    assert nothing.nodes == [] and nothing.token_count == 0 and nothing.omitted == 5


async def test_a_budget_from_a_given_node(store: SessionStore):
    sid, ids = await linear(store, [5, 4, 3, 2, 1])
    view = await store.context(sid, ids[2], max_tokens=7)
    assert ids_of(view) == ids[1:3] and view.token_count == 7 and view.omitted == 1


async def test_never_starts_inside_a_tool_exchange(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    ask = await store.append_node(sid, "user", "message", text("list"), token_count=1)
    calling = await store.append_node(sid, "assistant", "message", call("c1"), token_count=10)
    answer = await store.append_node(sid, "tool", "message", result("c1"), token_count=10)
    done = await store.append_node(sid, "assistant", "message", text("done"), token_count=1)
    # 11 tokens hold the result and the last message, but not without the result's call.
    view = await store.context(sid, max_tokens=20)
    assert ids_of(view) == [done.node_id] and view.omitted == 3 and view.token_count == 1
    view = await store.context(sid, max_tokens=21)
    assert ids_of(view) == [calling.node_id, answer.node_id, done.node_id]
    assert (await store.context(sid, max_tokens=22)).nodes[0].node_id == ask.node_id


async def test_interleaved_exchanges_are_one(store: SessionStore):
    """Calls a and b, then a's result, then b's: no start between the first call and last result."""
    sid = (await store.create_session(cwd=".")).session_id
    nodes = [
        await store.append_node(sid, "user", "message", text("go"), token_count=1),
        await store.append_node(sid, "assistant", "message", call("a"), token_count=1),
        await store.append_node(sid, "assistant", "message", call("b"), token_count=1),
        await store.append_node(sid, "tool", "message", result("a"), token_count=1),
        await store.append_node(sid, "tool", "message", result("b"), token_count=1),
        await store.append_node(sid, "assistant", "message", text("both"), token_count=1),
    ]
    ids = [n.node_id for n in nodes]
    assert ids_of(await store.context(sid, max_tokens=5)) == ids[1:]
    for budget in (1, 2, 3, 4):
        assert ids_of(await store.context(sid, max_tokens=budget)) == ids[5:]


async def test_a_node_answering_its_own_call_stands_alone(store: SessionStore):
    sid, ids = await linear(store, [3, 3])
    both = await store.append_node(
        sid, "assistant", "message", call("x") + result("x"), token_count=2
    )
    assert ids_of(await store.context(sid, max_tokens=2)) == [both.node_id]


async def test_the_compaction_head_is_kept_and_counted(store: SessionStore):
    sid, _ = await linear(store, [50, 50])
    head = await store.append_node(sid, "system", "compaction", text("summary"), token_count=7)
    after = [
        await store.append_node(sid, "user", "message", text(f"m{i}"), token_count=3)
        for i in range(4)
    ]
    full = await store.context(sid)
    assert full.token_count == 7 + 12
    assert await store.context(sid, max_tokens=19) == full
    view = await store.context(sid, max_tokens=15)
    assert ids_of(view) == [head.node_id] + [n.node_id for n in after[2:]]
    assert view.token_count == 13 and view.omitted == 2
    alone = await store.context(sid, max_tokens=7)
    assert ids_of(alone) == [head.node_id] and alone.token_count == 7 and alone.omitted == 4


async def test_a_result_whose_call_is_above_the_compaction_opens_no_exchange(
    store: SessionStore,
):
    sid = (await store.create_session(cwd=".")).session_id
    await store.append_node(sid, "assistant", "message", call("c1"), token_count=5)
    head = await store.append_node(sid, "system", "compaction", text("sum"), token_count=1)
    await store.append_node(sid, "user", "message", text("filler"), token_count=5)
    late = await store.append_node(sid, "tool", "message", result("c1"), token_count=1)
    view = await store.context(sid, max_tokens=2)
    assert ids_of(view) == [head.node_id, late.node_id] and view.omitted == 1


async def test_a_head_over_the_budget_is_a_budget_error(store: SessionStore, backend: Backend):
    sid, _ = await linear(store, [1])
    head = await store.append_node(sid, "system", "compaction", text("summary"), token_count=40)
    await store.append_node(sid, "user", "message", text("next"), token_count=1)
    before = snapshot(backend)
    with pytest.raises(BudgetError, match="40 tokens") as caught:
        await store.context(sid, max_tokens=39)
    assert caught.value.node_id == head.node_id and caught.value.session_id == sid
    assert caught.value.max_tokens == 39
    assert snapshot(backend) == before


async def test_nodes_without_a_count_are_estimated_from_their_stored_json(
    store: SessionStore, backend: Backend
):
    sid = (await store.create_session(cwd=".")).session_id
    counted = await store.append_node(sid, "user", "message", text("hi"), token_count=2)
    bare = await store.append_node(sid, "assistant", "message", text("é" * 9))  # 2 bytes each
    stored = execute(
        backend,
        f'SELECT content_json FROM "{nodes_table(sid)}" WHERE node_id = :node',
        {"node": bare.node_id},
    )[0][0]
    estimate = math.ceil(len(stored.encode()) / 4)
    assert estimate > math.ceil(len(stored) / 4)  # bytes, not characters
    view = await store.context(sid)
    assert view.token_count == 2 + estimate and view.estimated
    fits = await store.context(sid, max_tokens=1 + estimate)
    assert ids_of(fits) == [bare.node_id] and fits.estimated and fits.token_count == estimate
    only = await store.context(sid, counted.node_id, max_tokens=100)
    assert only.token_count == 2 and not only.estimated


async def test_limit_and_max_tokens_both_bound(store: SessionStore):
    sid, ids = await linear(store, [1, 1, 1, 1, 1])
    assert ids_of(await store.context(sid, limit=2, max_tokens=100)) == ids[3:]
    assert ids_of(await store.context(sid, limit=4, max_tokens=2)) == ids[3:]
    view = await store.context(sid, limit=0, max_tokens=100)
    assert view.nodes == [] and view.omitted == 5
    head = await store.append_node(sid, "system", "compaction", text("sum"), token_count=1)
    tail = [
        (await store.append_node(sid, "user", "message", text(f"t{i}"), token_count=1)).node_id
        for i in range(3)
    ]
    view = await store.context(sid, limit=2, max_tokens=100)  # the head is one of the two
    assert ids_of(view) == [head.node_id, tail[-1]] and view.omitted == 2
    with pytest.raises(BudgetError, match="limit 0"):
        await store.context(sid, limit=0, max_tokens=100)


async def test_a_budgeted_read_right_after_an_append(store: SessionStore):
    sid, ids = await linear(store, [1, 1, 1])
    assert ids_of(await store.context(sid, max_tokens=2)) == ids[1:]
    calling = await store.append_node(sid, "assistant", "message", call("k"), token_count=1)
    assert ids_of(await store.context(sid, max_tokens=2)) == [ids[2], calling.node_id]
    answer = await store.append_node(sid, "tool", "message", result("k"), token_count=1)
    assert ids_of(await store.context(sid, max_tokens=2)) == [calling.node_id, answer.node_id]
    head = await store.append_node(sid, "system", "compaction", text("s"), token_count=1)
    assert ids_of(await store.context(sid, max_tokens=2)) == [head.node_id]
    last = await store.append_node(sid, "tool", "message", result("k"), token_count=1)
    assert ids_of(await store.context(sid, max_tokens=2)) == [head.node_id, last.node_id]


async def test_an_empty_path_and_an_unknown_node(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    view = await store.context(sid, max_tokens=10)
    assert view.nodes == [] and view.token_count == 0 and view.omitted == 0
    await store.append_node(sid, "user", "message", text("hi"), token_count=1)
    with pytest.raises(NotFound, match="node_nope"):
        await store.context(sid, "node_nope", max_tokens=10)


@pytest.mark.parametrize("bad", [-1, True, False, 1.5, "10", [3]])
async def test_a_bad_budget_is_refused(store: SessionStore, backend: Backend, bad: object):
    sid, _ = await linear(store, [1, 2])
    before = snapshot(backend)
    with pytest.raises(InvalidArgument, match=f"max_tokens {bad!r}".replace("[", r"\[")):
        await store.context(sid, max_tokens=bad)  # type: ignore[arg-type]
    assert snapshot(backend) == before


async def test_a_huge_budget_holds_everything(store: SessionStore):
    sid, _ = await linear(store, [1, 2])
    assert await store.context(sid, max_tokens=2**70) == await store.context(sid)
