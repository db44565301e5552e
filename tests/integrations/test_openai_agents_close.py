"""``SoongSession.close()``: synchronous as ``SQLiteSession``'s, awaitable as async sessions'."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from pathlib import Path
from typing import Any

from agents import SQLiteSession

from soong_store import StoreClosed
from soong_store.integrations.openai_agents import SoongSession
from soong_store.store import runtime_of

RACES = 150
"""Races of a close and a use: a wedge showed in about 1 of 25 before the fix."""


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


def race_a_close_and_a_use(session: SoongSession) -> None:
    """One thread closes ``session`` while another uses it on a loop of its own."""
    start = threading.Barrier(2)

    def closer() -> None:
        start.wait()
        session.close()

    def user_of_it() -> None:
        start.wait()
        with contextlib.suppress(StoreClosed):  # the store may close under this use
            asyncio.run(session.get_items())

    threads = [threading.Thread(target=closer), threading.Thread(target=user_of_it)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
