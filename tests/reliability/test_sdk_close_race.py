"""The SDK adapter's close racing a use in another thread (``SoongSession``, a thread each)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from soong_store import StoreClosed
from soong_store.integrations.openai_agents import SoongSession
from tests.integrations.test_openai_agents_close import RACES, race_a_close_and_a_use, user

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


def test_a_close_racing_a_use_in_another_thread_never_wedges_the_session(tmp_path: Path) -> None:
    """The next use after a close that raced a use always works (it opens the store again)."""
    session = SoongSession("race", home=tmp_path / "home")
    asyncio.run(session.add_items([user("kept")]))
    wedged = 0
    for _ in range(RACES):
        race_a_close_and_a_use(session)
        try:
            assert asyncio.run(session.get_items()) == [user("kept")]
        except StoreClosed:
            wedged += 1
            session = SoongSession("race", home=tmp_path / "home")  # a fair start for the next
    session.close()
    assert wedged == 0
