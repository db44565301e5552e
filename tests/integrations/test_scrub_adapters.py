"""The SDK adapters on a store made with ``scrub=``: what they store is scrubbed.

The OpenAI Agents SDK's items (messages, tool calls, their outputs) and Google ADK's events and
state go through the store's scrubber; a credential in them is in no row of the database, and
reads give back the scrubbed text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types

from soong_store import SecretScrubber, SessionStore
from soong_store.integrations.adk import SoongSessionService
from soong_store.integrations.openai_agents import SoongSession
from tests.helpers import snapshot

SECRET = "github_pat_" + "11ABCDEFG0123456789_" + "abcdefghijklmnopqrstuvwxyz" * 2 + "ABCDEFGHIJ"
LABEL = "[REDACTED:github-token]"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with SessionStore(home=tmp_path / "home", scrub=SecretScrubber()) as opened:
        yield opened


async def test_openai_agents_items_are_scrubbed(store: SessionStore) -> None:
    session = SoongSession("s", store=store)
    await session.add_items(
        [
            {"role": "user", "content": f"use {SECRET}"},
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "sh",
                "arguments": f'{{"env": "GH_TOKEN={SECRET}"}}',
            },
            {"type": "function_call_output", "call_id": "c1", "output": f"echo {SECRET}"},
        ]
    )
    items = await session.get_items()
    assert items[0] == {"role": "user", "content": f"use {LABEL}"}
    assert items[1]["arguments"] == f'{{"env": "GH_TOKEN={LABEL}"}}'  # type: ignore[typeddict-item]
    assert items[2]["output"] == f"echo {LABEL}"  # type: ignore[typeddict-item]
    assert SECRET not in repr(snapshot(store))


async def test_adk_events_and_state_are_scrubbed(store: SessionStore) -> None:
    service = SoongSessionService(store=store)
    made = await service.create_session(
        app_name="app", user_id="u", state={"token": SECRET, "user:key": SECRET, "n": 1}
    )
    assert made.state["token"] == LABEL
    content = types.Content(role="user", parts=[types.Part(text=f"my token is {SECRET}")])
    event = Event(
        author="user",
        invocation_id="inv",
        content=content,
        actions=EventActions(state_delta={"app:key": SECRET}),
    )
    await service.append_event(made, event)
    read = await service.get_session(app_name="app", user_id="u", session_id=made.id)
    assert read is not None
    assert read.state == {"token": LABEL, "user:key": LABEL, "app:key": LABEL, "n": 1}
    [stored] = read.events
    assert stored.content is not None and stored.content.parts is not None
    assert stored.content.parts[0].text == f"my token is {LABEL}"
    assert SECRET not in repr(snapshot(store))
