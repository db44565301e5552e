"""SoongSession (the OpenAI Agents SDK's session) on a PostgreSQL store.

The SDK's session behaviours, as ``tests/integrations/test_openai_agents.py`` checks them on
SQLite: add, get (with limits), pop, clear, a Runner round trip; and two stores on one database,
as two hosts would open it, sharing one SDK session id.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, set_tracing_disabled

from soong_store import SessionStore
from soong_store.integrations.openai_agents import SoongSession
from tests import postgres_server
from tests.integrations.agents_support import ScriptedModel, run

pytestmark = [pytest.mark.asyncio, pytest.mark.postgresql]

set_tracing_disabled(True)


@pytest.fixture
def url(pg_url: str) -> Iterator[str]:
    """A database of its own at head, copied from the run's template."""
    template = postgres_server.template_database(pg_url)
    with postgres_server.fresh_database(pg_url, template=template) as made:
        yield made


@pytest.fixture
async def store(url: str, tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with SessionStore(home=tmp_path / "home", url=url) as opened:
        yield opened


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


async def test_add_get_limit_pop_and_clear(store: SessionStore) -> None:
    session = SoongSession("direct", store=store)
    assert await session.get_items() == []
    assert await session.pop_item() is None
    items = [user("M1"), assistant("R1"), user("M2"), assistant("R2"), user("M3")]
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.get_items(limit=2) == items[-2:]
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=-1) == items
    assert await session.pop_item() == items[-1]
    assert await session.get_items() == items[:-1]
    await session.clear_session()
    assert await session.get_items() == []
    await session.add_items([user("after the clear")])
    assert await session.get_items() == [user("after the clear")]
    assert len(await store.list_sessions()) == 1


async def test_a_runner_conversation_keeps_its_history(store: SessionStore) -> None:
    session = SoongSession("turns", store=store)
    model = ScriptedModel(["San Francisco", "California"])
    agent = Agent(name="test", model=model)
    first = await run("run", agent, "What city is the Golden Gate Bridge in?", session=session)
    second = await run("run", agent, "What state is it in?", session=session)
    assert (first.final_output, second.final_output) == ("San Francisco", "California")
    assert [i.get("content") for i in model.inputs[-1]][0] == (
        "What city is the Golden Gate Bridge in?"
    )
    assert len(await session.get_items()) == 4


async def test_two_stores_share_one_sdk_session_id(url: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with (
        SessionStore(home=home, url=url) as first_store,
        SessionStore(home=home, url=url) as second_store,
    ):
        one = SoongSession("shared", store=first_store)
        two = SoongSession("shared", store=second_store)
        # Both find the id new and create its session at once: one of them wins, both use it.
        ids = await asyncio.gather(one.store_session_id(), two.store_session_id())
        assert ids[0] == ids[1]
        assert len(await first_store.list_sessions()) == 1

        await one.add_items([user("hi from one")])
        assert await two.get_items() == [user("hi from one")]
        await asyncio.gather(
            *(one.add_items([user(f"one {i}")]) for i in range(10)),
            *(two.add_items([user(f"two {i}")]) for i in range(10)),
        )
        contents = [item["content"] for item in await one.get_items()]
        assert sorted(contents[1:]) == sorted(
            [f"one {i}" for i in range(10)] + [f"two {i}" for i in range(10)]
        )
        assert [item["content"] for item in await two.get_items()] == contents

        popped = await asyncio.gather(one.pop_item(), two.pop_item())
        assert popped[0] != popped[1]
        assert {item["content"] for item in popped} == set(contents[-2:])
        assert [item["content"] for item in await one.get_items()] == contents[:-2]

        await two.clear_session()
        assert await one.get_items() == []


async def test_a_session_with_its_own_store_on_a_url(url: str, tmp_path: Path) -> None:
    async with SoongSession("own", home=tmp_path / "home", url=url) as session:
        await session.add_items([user("hi")])
    again = SoongSession("own", home=tmp_path / "home", url=url)
    try:
        assert await again.get_items() == [user("hi")]
    finally:
        await again.close()
