"""Bad input gets a documented error and changes nothing stored."""

from __future__ import annotations

from typing import Any

import pytest

from soong_store import (
    InvalidArgument,
    InvalidContent,
    InvalidIdentifier,
    NotFound,
    SessionStore,
    SoongStoreError,
    TextBlock,
)
from tests.conftest import text
from tests.helpers import snapshot

pytestmark = pytest.mark.asyncio

HOSTILE_SESSION_IDS = [
    "x; DROP TABLE sessions; --",
    "sess_1' OR '1'='1",
    'a"b',
    "a-b",
    'nodes_x"--',
    "",
    "x" * 57,
    "sess/../../etc",
    "séssion",
    "sess_\x00",
    " sess",
    123,
    None,
]
HOSTILE_RECORD_IDS = ["node_1' OR 1=1 --", "a b", "", "x" * 200, "n\n", 5]


@pytest.fixture
async def seeded(store: SessionStore) -> dict[str, Any]:
    s = await store.create_session(cwd=".")
    run = await store.start_run(s.session_id, s.root_agent_id)
    node = await store.append_node(s.session_id, "user", "message", text("q"), run_id=run.run_id)
    return {"sid": s.session_id, "agent": s.root_agent_id, "run": run.run_id, "node": node.node_id}


@pytest.mark.parametrize("bad", HOSTILE_SESSION_IDS)
async def test_hostile_session_ids_refused_before_sql(store: SessionStore, seeded, bad):
    before = snapshot(store)
    calls = [
        store.get_session(bad),
        store.archive_session(bad),
        store.delete_session(bad),
        store.fork_session(bad, seeded["node"]),
        store.create_agent(bad, "sub"),
        store.start_run(bad, seeded["agent"]),
        store.append_node(bad, "user", "message", text("x")),
        store.append_event(bad, "e"),
        store.get_node(bad, seeded["node"]),
        store.children(bad, seeded["node"]),
        store.active_path(bad),
        store.context(bad),
        store.switch_node(bad, seeded["node"]),
        store.timeline(bad),
    ]
    for call in calls:
        with pytest.raises(InvalidIdentifier):
            await call
    with pytest.raises(InvalidIdentifier):
        async with store.transaction(bad):
            pass
    assert snapshot(store) == before


@pytest.mark.parametrize("bad", HOSTILE_RECORD_IDS)
async def test_hostile_record_ids_refused(store: SessionStore, seeded, bad):
    sid = seeded["sid"]
    before = snapshot(store)
    calls = [
        store.get_node(sid, bad),
        store.switch_node(sid, bad),
        store.fork_session(sid, bad),
        store.append_node(sid, "user", "message", text("x"), parent_id=bad),
        store.append_node(sid, "user", "message", text("x"), run_id=bad),
        store.append_node(sid, "user", "message", text("x"), agent_id=bad),
        store.append_event(sid, "e", node_id=bad),
        store.start_run(sid, bad),
        store.finish_run(bad, "completed", "completed"),
        store.update_agent(bad, status="completed"),
        store.create_agent(sid, "fork", fork_from_node_id=bad),
    ]
    for call in calls:
        with pytest.raises(InvalidIdentifier):
            await call
    assert snapshot(store) == before


async def test_unknown_ids_are_not_found(store: SessionStore, seeded):
    sid = seeded["sid"]
    before = snapshot(store)
    calls = [
        store.get_session("sess_20990101_000000_abcd"),
        store.get_node(sid, "node_unknown"),
        store.children(sid, "node_unknown"),
        store.active_path(sid, "node_unknown"),
        store.switch_node(sid, "node_unknown"),
        store.get_run("run_unknown"),
        store.get_agent("agent_unknown"),
        store.finish_run("run_unknown", "completed", "completed"),
        store.update_run("run_unknown", status="running"),
        store.update_agent("agent_unknown", status="completed"),
        store.start_run(sid, "agent_unknown"),
        store.append_node(sid, "user", "message", text("x"), agent_id="agent_unknown"),
        store.append_event(sid, "e", run_id="run_unknown"),
        store.create_agent(sid, "sub", created_by_run_id="run_unknown"),
        store.create_agent(sid, "fork", fork_from_node_id="node_unknown"),
    ]
    for call in calls:
        with pytest.raises(NotFound):
            await call
    assert snapshot(store) == before


BAD_NODE_ARGS: list[dict[str, Any]] = [
    {"role": "robot"},
    {"role": "USER"},
    {"node_type": "chat"},
    {"content": "just a string"},
    {"content": {"type": "text", "text": "not a list"}},
    {"content": [{"type": "image", "url": "x"}]},
    {"content": [{"type": "text", "text": 5}]},
    {"content": [{"type": "text", "text": "x", "extra": 1}]},
    {"content": [{"type": "json", "data": float("nan")}]},
    {"content": [{"type": "json", "data": {"deep": [float("inf")]}}]},
    {"content": [{"type": "tool_call", "tool_call_id": "", "name": "x"}]},
    {"content": [{"type": "tool_result", "tool_call_id": "c", "content": [{"type": "tool_call"}]}]},
    {"content": [{"type": "text", "text": "\ud800"}]},
    {"metadata": {"x": float("nan")}},
    {"metadata": {1: "non-string key"}},
    {"metadata": object()},
    {"token_count": -1},
    {"token_count": 1.5},
    {"token_count": True},
    {"event": {"level": "info"}},
    {"event": {"event_type": "x", "node_id": "node_other"}},
    {"event": {"event_type": ""}},
]


@pytest.mark.parametrize("override", BAD_NODE_ARGS, ids=lambda o: repr(o)[:40])
async def test_bad_node_input_refused(store: SessionStore, seeded, override):
    args: dict[str, Any] = {"role": "user", "node_type": "message", "content": text("x")}
    args.update(override)
    before = snapshot(store)
    with pytest.raises(InvalidArgument):
        await store.append_node(seeded["sid"], **args)
    assert snapshot(store) == before


BAD_CALLS = [
    ("append_event", {"event_type": "e", "level": "fatal"}),
    ("append_event", {"event_type": ""}),
    ("append_event", {"event_type": "x" * 129}),
    ("append_event", {"event_type": "e", "payload": float("nan")}),
    ("append_event", {"event_type": "e", "tool_call_id": 7}),
    ("create_agent", {"agent_type": "robot"}),
    ("start_run", {"status": "walking"}),
    ("finish_run", {"status": "completed", "end_reason": "stop_hook_prevented"}),
    ("finish_run", {"status": "done", "end_reason": "completed"}),
    ("finish_run", {"status": "completed", "end_reason": "completed", "usage": float("inf")}),
    ("update_run", {"status": "sideways"}),
    ("update_run", {"turn_count": -3}),
    ("update_agent", {"status": "asleep"}),
    ("list_sessions", {"status": "deleted"}),
    ("list_sessions", {"limit": 0}),
    ("create_session", {"cwd": ""}),
    ("create_session", {"cwd": ".", "metadata": {"a": float("nan")}}),
    ("create_session", {"cwd": ".", "root_agent_type": "fork"}),
]


@pytest.mark.parametrize(("method", "kwargs"), BAD_CALLS, ids=lambda x: str(x)[:40])
async def test_bad_arguments_refused(store: SessionStore, seeded, method, kwargs):
    full = dict(kwargs)
    if method in ("append_event", "create_agent"):
        full["session_id"] = seeded["sid"]
    if method == "start_run":
        full.update(session_id=seeded["sid"], agent_id=seeded["agent"])
    if method in ("finish_run", "update_run"):
        full["run_id"] = seeded["run"]
    if method == "update_agent":
        full["agent_id"] = seeded["agent"]
    before = snapshot(store)
    with pytest.raises(InvalidArgument) as info:
        await getattr(store, method)(**full)
    assert isinstance(info.value, SoongStoreError) and str(info.value)
    assert snapshot(store) == before


async def test_nan_message_names_where(store: SessionStore, seeded):
    with pytest.raises(InvalidContent, match=r"content\[0\]\.data .* at \$\.a\[1\]"):
        await store.append_node(
            seeded["sid"], "user", "message", [{"type": "json", "data": {"a": [1, float("nan")]}}]
        )


BAD_CONTENT = [
    (TextBlock(text="hi"), r"content must be a list of blocks, got a TextBlock; wrap it"),
    ({"type": "text", "text": "hi"}, r"content must be a list of blocks, got a dict; wrap it"),
    ([{"txt": "hi"}], r"content\[0\]: no 'type' key \(keys given: 'txt'\); expected one of: text,"),
    (
        [{"type": "text", "txt": "hi"}],
        r"content\[0\] \(type 'text'\): unknown key 'txt'; expected keys: text",
    ),
    (
        [{"type": "tool_result", "tool_call_id": "c", "content": [{"type": "json", "dta": 1}]}],
        r"content\[0\]\.content\[0\] \(type 'json'\): unknown key 'dta'; expected keys: data,",
    ),
]


@pytest.mark.parametrize(("content", "message"), BAD_CONTENT, ids=lambda x: repr(x)[:40])
async def test_bad_content_is_told_by_block_key_and_what_is_expected(
    store: SessionStore, seeded, content, message
):
    before = snapshot(store)
    with pytest.raises(InvalidContent, match=message):
        await store.append_node(seeded["sid"], "user", "message", content)
    with pytest.raises(InvalidContent, match=message):
        async with store.transaction(seeded["sid"]) as tx:
            tx.add_node("user", "message", text("fine"))
            tx.add_node("user", "message", content)
    assert snapshot(store) == before
