"""A tool result answers a tool call made on its path, and only a model's node makes calls."""

from __future__ import annotations

import pytest

from soong_store import (
    InvalidContent,
    SessionStore,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_store.check.run import check_store
from tests.conftest import text

pytestmark = pytest.mark.asyncio


def call(*ids: str) -> list[ToolCallBlock]:
    return [ToolCallBlock(tool_call_id=i, name="read", arguments={"path": "a.py"}) for i in ids]


def result(*ids: str) -> list[ToolResultBlock]:
    return [ToolResultBlock(tool_call_id=i, content=[TextBlock(text="ok")]) for i in ids]


async def session_notes(store: SessionStore, sid: str) -> list[str]:
    """The check's notes about the session (a backend's own check may add notes of its own)."""
    return [n for n in (await check_store(store, sid)).notes if n.startswith(f"session {sid}:")]


async def started(store: SessionStore) -> str:
    sid = (await store.create_session(cwd=".")).session_id
    await store.append_node(sid, "user", "message", text("go"))
    return sid


async def test_results_answer_calls_up_the_path(store: SessionStore):
    sid = await started(store)
    await store.append_node(sid, "assistant", "message", call("c1", "c2", "c3"))
    for each in ("c1", "c2", "c3"):  # one tool node per result, each under the one before
        await store.append_node(sid, "tool", "message", result(each))
    await store.append_node(sid, "assistant", "message", call("c4"))
    for _ in range(40):  # far above: found by climbing in growing steps
        await store.append_node(sid, "user", "message", text("and"))
    await store.append_node(sid, "tool", "message", result("c4", "c1"))
    assert await session_notes(store, sid) == []


async def test_a_result_without_its_call_is_refused(store: SessionStore):
    sid = await started(store)
    first = await store.append_node(sid, "assistant", "message", call("c1"))
    for _ in range(20):
        await store.append_node(sid, "user", "message", text("and"))
    before = await store.list_nodes(sid)
    with pytest.raises(InvalidContent, match="'c_nowhere'") as caught:
        await store.append_node(sid, "tool", "message", result("c1", "c_nowhere"))
    assert caught.value.tool_call_id == "c_nowhere"
    # a call on another branch is not on the path
    await store.append_node(sid, "user", "message", text("retry"), parent_id=first.parent_id)
    with pytest.raises(InvalidContent, match="'c1'"):
        await store.append_node(sid, "tool", "message", result("c1"))
    assert len(await store.list_nodes(sid)) == len(before) + 1


async def test_a_user_node_makes_no_tool_call(store: SessionStore):
    sid = await started(store)
    with pytest.raises(InvalidContent, match="'c1'") as caught:
        await store.append_node(sid, "user", "message", [*text("do it"), *call("c1")])
    assert caught.value.tool_call_id == "c1"
    async with store.transaction(sid) as unit:
        unit.add_node("assistant", "message", call("c1"))  # a model's node does
    assert len(await store.list_nodes(sid)) == 2


async def test_in_a_unit_the_call_may_be_in_an_earlier_node_of_it(store: SessionStore):
    sid = await started(store)
    async with store.transaction(sid) as unit:
        unit.add_node("assistant", "message", call("c1", "c2"))
        unit.add_node("tool", "message", result("c1"))
        unit.add_node("tool", "message", result("c2"))
    before = await store.list_nodes(sid)
    with pytest.raises(InvalidContent, match="'c3'"):
        async with store.transaction(sid) as unit:
            unit.add_node("assistant", "message", call("c4"))
            unit.add_node("tool", "message", result("c4"))
            unit.add_node("tool", "message", result("c3"))
    assert await store.list_nodes(sid) == before


async def test_recorded_history_keeps_its_shape_and_check_notes_it(store: SessionStore):
    sid = await started(store)
    recorded = {"imported_from": {"format": "elsewhere"}}
    lone = await store.append_node(sid, "tool", "message", result("c9"), metadata=recorded)
    asked = await store.append_node(sid, "user", "message", call("c8"), metadata=recorded)
    assert (await check_store(store, sid)).ok
    notes = await session_notes(store, sid)
    assert len(notes) == 2
    assert lone.node_id in notes[0] and "'c9'" in notes[0]
    assert asked.node_id in notes[1] and "'c8'" in notes[1]
