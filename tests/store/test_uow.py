"""The unit of work: all of it lands or none of it does."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import event

from soong_store import (
    BranchError,
    InvalidArgument,
    InvalidContent,
    NotFound,
    SessionStore,
    StorageError,
)
from soong_store.store import runtime_of
from tests.conftest import text
from tests.helpers import snapshot

pytestmark = pytest.mark.asyncio


async def test_node_and_event_commit_together(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    async with store.transaction(sid) as tx:
        a = tx.add_node("user", "message", text("q"))
        b = tx.add_node("assistant", "message", text("a"), event="model_replied")
        c = tx.add_node("tool", "message", text("t"))
        tx.add_event("tool_failed", level="error", node_id=c, payload={"why": "x"})
        tx.add_event("note")
    assert [n.node_id for n in tx.nodes] == [a, b, c]
    assert [n.node_seq for n in tx.nodes] == [1, 2, 3]
    assert tx.nodes[1].parent_id == a and tx.nodes[2].parent_id == b
    kinds = [(e.event_type, e.node_id) for e in tx.events]
    assert kinds == [
        ("node_created", a),
        ("model_replied", b),
        ("tool_failed", c),
        ("note", None),
    ]
    assert [e.seq for e in tx.events] == [2, 3, 4, 5]
    assert await store.active_path(sid) == tx.nodes


async def test_exception_inside_block_leaves_nothing(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    before = snapshot(store)
    with pytest.raises(RuntimeError):
        async with store.transaction(sid) as tx:
            tx.add_node("user", "message", text("q"))
            tx.add_event("e")
            raise RuntimeError("the caller changed its mind")
    assert snapshot(store) == before


async def test_failure_midway_rolls_back_earlier_ops(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    first = await store.append_node(sid, "user", "message", text("q"))
    await store.append_node(sid, "assistant", "message", text("a"))
    before = snapshot(store)
    with pytest.raises(BranchError):
        async with store.transaction(sid) as tx:
            tx.add_node("user", "message", text("fine"))
            tx.add_event("fine too")
            tx.add_node("assistant", "message", text("bad branch"), parent_id=first.node_id)
    assert snapshot(store) == before
    with pytest.raises(NotFound):
        async with store.transaction(sid) as tx:
            tx.add_node("user", "message", text("fine"))
            tx.add_event("x", node_id="node_nowhere")
    assert snapshot(store) == before


async def test_branch_rule_sees_the_units_own_nodes_and_the_active_nodes_children(
    store: SessionStore,
):
    sid = (await store.create_session(cwd=".")).session_id
    first = await store.append_node(sid, "user", "message", text("q"))
    with pytest.raises(BranchError):  # the first node of the unit gave `first` a child
        async with store.transaction(sid) as tx:
            tx.add_node("assistant", "message", text("a"))
            tx.add_node("assistant", "message", text("again"), parent_id=first.node_id)
    async with store.transaction(sid) as tx:  # a new node has no child yet: it takes one
        a = tx.add_node("assistant", "message", text("a"))
        tx.add_node("tool", "message", text("t"), parent_id=a)
        tx.add_node("user", "message", text("a branch"), parent_id=first.node_id)
    await store.switch_node(sid, first.node_id)  # the active node now has children
    with pytest.raises(BranchError):
        await store.append_node(sid, "assistant", "message", text("b"))
    branch = await store.append_node(sid, "user", "message", text("another branch"))
    assert branch.parent_id == first.node_id
    assert [n.node_seq for n in await store.list_nodes(sid)] == [1, 2, 3, 4, 5]


async def test_failure_at_commit_leaves_nothing(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    await store.append_node(sid, "user", "message", text("q"))
    before = snapshot(store)
    engine = runtime_of(store).write_engine
    assert engine is not None

    def fail_commit(conn: Any) -> None:
        raise OSError(28, "No space left on device (injected)")

    event.listen(engine, "commit", fail_commit)
    try:
        with pytest.raises(StorageError, match="No space left"):
            async with store.transaction(sid) as tx:
                tx.add_node("assistant", "message", text("a"))
                tx.add_node("user", "message", text("b"))
                tx.add_event("e")
    finally:
        event.remove(engine, "commit", fail_commit)
    assert snapshot(store) == before
    again = await store.append_node(sid, "assistant", "message", text("a"))
    assert again.node_seq == 2


async def test_bad_input_raises_at_add_and_nothing_is_queued(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    before = snapshot(store)
    async with store.transaction(sid) as tx:
        with pytest.raises(InvalidArgument):
            tx.add_node("robot", "message", text("x"))
        with pytest.raises(InvalidContent):
            tx.add_node("user", "message", [{"type": "json", "data": float("nan")}])
        with pytest.raises(InvalidArgument):
            tx.add_event("e", level="loud")
    assert tx.nodes == [] and tx.events == []
    assert snapshot(store) == before


async def test_finished_unit_refuses_more(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id
    async with store.transaction(sid) as tx:
        tx.add_event("one")
    with pytest.raises(InvalidArgument):
        tx.add_event("two")


async def test_cancelled_caller_still_commits_whole_unit(store: SessionStore):
    sid = (await store.create_session(cwd=".")).session_id

    async def write() -> None:
        async with store.transaction(sid) as tx:
            for i in range(50):
                tx.add_node("user" if i % 2 == 0 else "assistant", "message", text(str(i)))

    task = asyncio.create_task(write())
    await asyncio.sleep(0)  # its unit is submitted: one turn on the loop may commit it
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await store.append_event(sid, "barrier")  # FIFO: runs after the cancelled unit
    nodes = await store.active_path(sid)
    assert len(nodes) in (0, 50)
    events = await store.timeline(sid)
    assert len([e for e in events if e.event_type == "node_created"]) == len(nodes)
