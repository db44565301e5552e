"""SoongSession against the installed OpenAI Agents SDK: its Session protocol's behaviours.

The SDK's own session tests (tests/memory/test_session.py and test_session_limit.py of
openai-agents-python) exercise, for ``SQLiteSession``: Runner round trips in the three run
modes, direct add/get/clear, pop_item order and isolation, get_items limits, session_settings,
odd content and concurrent adds. The same behaviours are checked here against ``SoongSession``;
tests of ``SQLiteSession`` internals (its thread-local connections, file locks, rollback of a
failed sqlite3 write, corrupt JSON rows) have no counterpart: the store owns its connections.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, set_tracing_disabled
from agents.memory import Session, SessionSettings

from soong_store import InvalidArgument, InvalidContent, SessionStore
from soong_store.integrations.openai_agents import SoongSession
from tests.integrations.agents_support import ScriptedModel, run

set_tracing_disabled(True)
MODES = ["run", "run_sync", "run_streamed"]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with SessionStore(home=tmp_path / "home") as opened:
        yield opened


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


async def test_it_is_a_session_of_the_sdk(store: SessionStore) -> None:
    assert isinstance(SoongSession("a", store=store), Session)


async def test_importing_the_store_does_not_import_the_sdk() -> None:
    code = "import sys, soong_store; print('agents' in sys.modules, 'openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_second_turn_sees_the_first(store: SessionStore, mode: str) -> None:
    session = SoongSession("turns", store=store)
    model = ScriptedModel(["San Francisco", "California"])
    agent = Agent(name="test", model=model)
    first = await run(mode, agent, "What city is the Golden Gate Bridge in?", session=session)
    second = await run(mode, agent, "What state is it in?", session=session)
    assert (first.final_output, second.final_output) == ("San Francisco", "California")
    contents = [item.get("content") for item in model.inputs[-1]]
    assert contents[0] == "What city is the Golden Gate Bridge in?"
    assert contents[-1] == "What state is it in?"
    assert len(await session.get_items()) == 4


@pytest.mark.parametrize("mode", MODES)
async def test_sessions_of_different_ids_do_not_share_history(
    store: SessionStore, mode: str
) -> None:
    model = ScriptedModel(["one", "two"])
    agent = Agent(name="test", model=model)
    await run(mode, agent, "first", session=SoongSession("a", store=store))
    await run(mode, agent, "second", session=SoongSession("b", store=store))
    assert [i.get("content") for i in model.inputs[-1]] == ["second"]


async def test_runner_session_settings_limit_the_history_sent(store: SessionStore) -> None:
    session = SoongSession("limited", store=store)
    await session.add_items([user(f"m{i}") if i % 2 == 0 else assistant(f"r{i}") for i in range(6)])
    model = ScriptedModel(["ok"])
    config = RunConfig(session_settings=SessionSettings(limit=2))
    await run("run", Agent(name="test", model=model), "now", session=session, run_config=config)
    assert [i.get("content") for i in model.inputs[-1]] == ["m4", "r5", "now"]


async def test_add_get_and_clear(store: SessionStore) -> None:
    session = SoongSession("direct", store=store)
    await session.add_items([user("Hello"), assistant("Hi there!")])
    assert await session.get_items() == [user("Hello"), assistant("Hi there!")]
    await session.clear_session()
    assert await session.get_items() == []


async def test_items_got_are_the_caller_s_to_change(store: SessionStore) -> None:
    session = SoongSession("mine", store=store)
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": {"q": ["x"]}}
    message = {"role": "user", "content": [{"type": "input_text", "text": "hi", "extra": {}}]}
    await session.add_items([call, message])  # type: ignore[list-item]
    first: list[Any] = await session.get_items()
    first[0]["arguments"]["q"].append("changed")
    first[1]["content"][0]["extra"]["k"] = 1
    first[1]["content"].append({"type": "input_text", "text": "more"})
    assert await session.get_items() == [call, message]


async def test_pop_returns_the_items_newest_first_then_none(store: SessionStore) -> None:
    session = SoongSession("pop", store=store)
    assert await session.pop_item() is None
    items = [user("Hello"), assistant("Hi there!"), user("How are you?")]
    await session.add_items(items)
    assert await session.pop_item() == items[2]
    assert await session.get_items() == items[:2]
    assert await session.pop_item() == items[1]
    assert await session.pop_item() == items[0]
    assert await session.pop_item() is None
    assert await session.get_items() == []


async def test_pop_touches_only_its_own_session(store: SessionStore) -> None:
    one, two = SoongSession("one", store=store), SoongSession("two", store=store)
    await one.add_items([user("a1"), assistant("a2")])
    await two.add_items([user("b1"), assistant("b2")])
    assert await one.pop_item() == assistant("a2")
    assert await two.get_items() == [user("b1"), assistant("b2")]


async def test_get_items_limit_reads_the_latest_in_order(store: SessionStore) -> None:
    session = SoongSession("limit", store=store)
    items = [user("M1"), assistant("R1"), user("M2"), assistant("R2"), user("M3"), assistant("R3")]
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.get_items(limit=2) == items[-2:]
    assert await session.get_items(limit=4) == items[-4:]
    assert await session.get_items(limit=10) == items
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=-1) == items


async def test_session_settings(store: SessionStore) -> None:
    assert SoongSession("s", store=store).session_settings == SessionSettings()
    assert SoongSession("s", store=store, session_settings={"limit": 3}).session_settings == (
        SessionSettings(limit=3)
    )
    session = SoongSession("s", store=store, session_settings=SessionSettings(limit=2))
    items = [user(f"m{i}") for i in range(5)]
    await session.add_items(items)
    assert await session.get_items() == items[-2:]
    assert await session.get_items(limit=4) == items[-4:]


async def test_odd_text_is_kept_as_given(store: SessionStore) -> None:
    session = SoongSession("odd", store=store)
    items = [
        user("こんにちは 😊 \u200b"),
        assistant("'; DROP TABLE sessions; --"),
        user('"quoted" \\ back\nslash\ttab'),
        user(""),
    ]
    await session.add_items(items)
    assert await session.get_items() == items


async def test_concurrent_adds_keep_every_item(store: SessionStore) -> None:
    session = SoongSession("busy", store=store)
    await asyncio.gather(*(session.add_items([user(f"m{i}")]) for i in range(20)))
    assert sorted(i["content"] for i in await session.get_items()) == sorted(
        f"m{i}" for i in range(20)
    )


async def test_a_failed_add_writes_nothing(store: SessionStore) -> None:
    session = SoongSession("bad", store=store)
    await session.add_items([user("kept")])
    with pytest.raises(InvalidContent):
        await session.add_items([user("not kept"), "not an item"])  # type: ignore[list-item]
    with pytest.raises(InvalidContent):
        await session.add_items([user("not kept"), {"type": "json", "x": float("nan")}])
    assert await session.get_items() == [user("kept")]


@pytest.mark.parametrize("bad", ["", "a\x00b", 7])
def test_a_bad_sdk_session_id_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        SoongSession(bad)


async def test_own_store_opens_on_use_and_closes(tmp_path: Path) -> None:
    async with SoongSession("own", home=tmp_path / "home") as session:
        await session.add_items([user("hi")])
    again = SoongSession("own", home=tmp_path / "home")
    try:
        assert await again.get_items() == [user("hi")]
    finally:
        await again.close()
