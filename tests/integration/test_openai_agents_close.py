"""``SoongSession.close()``: synchronous as ``SQLiteSession``'s, awaitable as async sessions'."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

from agents import SQLiteSession

from soong_store.integrations.openai_agents import SoongSession
from soong_store.store import runtime_of


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def is_open(session: SoongSession) -> bool:
    return runtime_of(session.store).is_open


def test_close_has_both_shapes_of_the_sdk_sessions() -> None:
    ours = inspect.signature(SoongSession.close)
    assert list(ours.parameters) == list(inspect.signature(SQLiteSession.close).parameters)
    assert not inspect.iscoroutinefunction(SoongSession.close)


def test_a_sync_close_outside_any_loop_closes_the_store_once(tmp_path: Path) -> None:
    session = SoongSession("sync", home=tmp_path / "home")
    asyncio.run(session.add_items([user("kept"), user("also kept")]))
    assert is_open(session)
    session.close()
    assert not is_open(session)
    session.close()  # again: nothing to do
    again = SoongSession("sync", home=tmp_path / "home")
    try:
        assert asyncio.run(again.get_items()) == [user("kept"), user("also kept")]
    finally:
        again.close()


async def test_a_sync_close_inside_a_running_loop_closes_before_it_returns(
    tmp_path: Path,
) -> None:
    session = SoongSession("in-loop", home=tmp_path / "home")
    await session.add_items([user("kept")])
    session.close()
    assert not is_open(session)
    await session.close()  # awaitable as well, and idempotent
    assert not is_open(session)
    assert await session.get_items() == [user("kept")]  # the next use opens the store again
    assert is_open(session)
    await session.close()
    assert not is_open(session)


async def test_close_leaves_a_store_it_was_given_open(tmp_path: Path) -> None:
    session = SoongSession("given", home=tmp_path / "home")
    await session.add_items([user("kept")])
    shared = SoongSession("given", store=session.store)
    shared.close()
    await shared.close()
    assert is_open(session)
    assert await shared.get_items() == [user("kept")]
    session.close()
