"""SoongSession in the store: exact items, nodes and blocks, pops and clears as tree moves."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore, ToolCallBlock, ToolResultBlock
from soong_store.check.run import check_store
from soong_store.integrations.openai_agents import SoongSession

CALL = {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"q":"x"}'}
SPACED_CALL = {**CALL, "call_id": "call_2", "arguments": '{ "q": "x" }', "id": "fc_2"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "found"}
PARTS_OUTPUT = {
    "call_id": "call_2",
    "output": [{"type": "input_text", "text": "a"}],
    "type": "function_call_output",
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [
        {"type": "output_text", "text": "yes", "annotations": [], "logprobs": []},
        {"type": "refusal", "refusal": "no"},
    ],
}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e30="}
UNKNOWN = {"zeta": 1, "type": "future_item", "alpha": {"nested": [1, 2.5, None, True]}}
DEVELOPER = {"role": "developer", "content": "be brief"}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with SessionStore(home=tmp_path / "home", spill_bytes=1024) as opened:
        yield opened


def keys(items: list[Any]) -> list[list[str]]:
    return [list(i) for i in items]


async def test_items_round_trip_exactly_keys_in_order(store: SessionStore) -> None:
    session = SoongSession("exact", store=store)
    items = [DEVELOPER, {"role": "user", "content": "hi"}, CALL, SPACED_CALL, OUTPUT]
    items += [PARTS_OUTPUT, MESSAGE, REASONING, UNKNOWN]
    await session.add_items(items)
    got = await session.get_items()
    assert got == items and keys(got) == keys(items)
    assert keys(await SoongSession("exact", store=store).get_items()) == keys(items)


async def test_items_over_the_spill_threshold_round_trip(store: SessionStore) -> None:
    session = SoongSession("big", store=store)
    big = {"type": "future_item", "blob": ["x" * 100] * 50}
    big_output = {"type": "function_call_output", "call_id": "c", "output": [{"k": "y" * 3000}]}
    await session.add_items([big, big_output])
    assert len(await store.list_artifacts(await session.store_session_id())) == 2
    assert await session.get_items() == [big, big_output]
    assert await session.pop_item() == big_output


async def test_items_map_to_roles_and_blocks(store: SessionStore) -> None:
    session = SoongSession("map", store=store)
    await session.add_items([DEVELOPER, {"role": "user", "content": "hi"}, CALL, OUTPUT, MESSAGE])
    nodes = await store.active_path(await session.store_session_id())
    assert [n.role for n in nodes] == ["system", "user", "assistant", "tool", "assistant"]
    assert [n.node_type for n in nodes] == ["message"] * 5
    call, result = nodes[2].content[0], nodes[3].content[0]
    assert isinstance(call, ToolCallBlock) and call.arguments == {"q": "x"}
    assert (call.tool_call_id, call.name) == ("call_1", "lookup")
    assert isinstance(result, ToolResultBlock) and result.tool_call_id == "call_1"
    assert [b.type for b in nodes[4].content] == ["text", "json"]


async def test_after_a_pop_an_assistant_item_needs_no_user_node(store: SessionStore) -> None:
    session = SoongSession("repop", store=store)
    await session.add_items([{"role": "user", "content": "q"}, CALL, OUTPUT])
    assert await session.pop_item() == OUTPUT
    other = {**OUTPUT, "output": "found again"}
    await session.add_items([other, {"role": "assistant", "content": "done"}])
    assert await session.get_items() == [
        {"role": "user", "content": "q"},
        CALL,
        other,
        {"role": "assistant", "content": "done"},
    ]
    sid = await session.store_session_id()
    assert len(await store.list_nodes(sid)) == 5  # the popped output stays in the tree
    assert (await check_store(store, sid)).ok


async def test_clear_keeps_the_history_and_any_item_starts_the_new_root(
    store: SessionStore,
) -> None:
    session = SoongSession("clear", store=store)
    await session.add_items(
        [{"role": "user", "content": "old"}, {"role": "assistant", "content": "a"}]
    )
    await session.clear_session()
    await session.add_items([OUTPUT, {"role": "assistant", "content": "new"}])
    assert await session.get_items() == [OUTPUT, {"role": "assistant", "content": "new"}]
    sid = await session.store_session_id()
    nodes = await store.list_nodes(sid)
    assert len(nodes) == 4
    assert [n.parent_id is None for n in nodes] == [True, False, True, False]
    assert (await check_store(store, sid)).ok


async def test_popping_the_first_item_empties_the_history(store: SessionStore) -> None:
    session = SoongSession("first", store=store)
    await session.add_items([CALL])
    assert await session.pop_item() == CALL
    assert await session.get_items() == []
    await session.add_items([OUTPUT])
    assert await session.get_items() == [OUTPUT]


async def test_clear_with_delete_removes_the_store_session(store: SessionStore) -> None:
    session = SoongSession("private", store=store)
    await session.add_items([{"role": "user", "content": "secret"}])
    first = await session.store_session_id()
    await session.clear_session(delete=True)
    assert [s.session_id for s in await store.list_sessions()] == []
    assert await session.get_items() == []
    assert await session.store_session_id() != first


async def test_one_sdk_id_is_one_store_session(store: SessionStore) -> None:
    one, two = SoongSession("same", store=store), SoongSession("same", store=store)
    await one.add_items([{"role": "user", "content": "hi"}])
    assert await two.store_session_id() == await one.store_session_id()
    assert len(await store.list_sessions()) == 1
    record = await store.get_session(await one.store_session_id())
    assert record.metadata == {"openai-agents": {"session_id": "same"}}


async def test_a_node_another_writer_appended_reads_as_a_message(store: SessionStore) -> None:
    session = SoongSession("mixed", store=store)
    await session.add_items([{"role": "user", "content": "hi"}])
    sid = await session.store_session_id()
    await store.append_node(sid, "assistant", "message", [{"type": "text", "text": "from soong"}])
    assert (await session.get_items())[-1] == {"role": "assistant", "content": "from soong"}


async def test_a_store_session_deleted_behind_its_back_gives_way_to_a_new_one(
    store: SessionStore,
) -> None:
    session = SoongSession("gone", store=store)
    await session.add_items([{"role": "user", "content": "old"}])
    first = await session.store_session_id()
    await store.delete_session(first)
    assert await session.get_items() == []
    await session.add_items([{"role": "user", "content": "new"}])
    assert await SoongSession("gone", store=store).get_items() == [
        {"role": "user", "content": "new"}
    ]
    assert await session.store_session_id() != first
