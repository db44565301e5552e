"""An ADK ``Runner`` with a fake model: two agents converse on SoongSessionService, on each backend.

The coordinator hands the user over to a helper (ADK's ``transfer_to_agent``); the session then
holds both agents' events in order, and ``soong-store tree`` shows both agents.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents.llm_agent import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

from soong_store.integrations.adk import SoongSessionService
from tests.backends import Backend


class ScriptedModel(BaseLlm):
    """A model that answers each call with the next of its scripted replies."""

    replies: list[types.Part]
    calls: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        part = self.replies[self.calls]
        self.calls += 1
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def user_says(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def converse(service: SoongSessionService) -> list[Any]:
    helper = LlmAgent(
        name="helper",
        model=ScriptedModel(model="fake", replies=[types.Part(text="helper: the answer is 42")]),
        instruction="Answer questions.",
    )
    transfer = types.Part(
        function_call=types.FunctionCall(name="transfer_to_agent", args={"agent_name": "helper"})
    )
    coordinator = LlmAgent(
        name="coordinator",
        model=ScriptedModel(model="fake", replies=[transfer]),
        instruction="Route the user.",
        sub_agents=[helper],
    )
    runner = Runner(app_name="demo", agent=coordinator, session_service=service)
    await service.create_session(app_name="demo", user_id="ann", session_id="chat")
    return [
        e
        async for e in runner.run_async(
            user_id="ann", session_id="chat", new_message=user_says("what is the answer?")
        )
    ]


async def test_a_runner_conversation_of_two_agents_is_stored_and_shown(backend: Backend) -> None:
    async with SoongSessionService(home=backend.home, url=backend.url) as service:
        emitted = await converse(service)
        session = await service.get_session(app_name="demo", user_id="ann", session_id="chat")
        assert session is not None
        assert [e.author for e in session.events] == ["user", *(e.author for e in emitted)]
        assert {"coordinator", "helper"} <= {e.author for e in session.events}
        assert session.events[-1].content is not None
        assert session.events[-1].content.parts is not None
        assert session.events[-1].content.parts[0].text == "helper: the answer is 42"
        sid = await service.store_session_id(app_name="demo", user_id="ann", session_id="chat")
        assert sid is not None
        names = {(a.metadata or {}).get("name") for a in await service.store.list_agents(sid)}
        assert {"coordinator", "helper"} <= names
    env = {k: v for k, v in os.environ.items() if k != "SOONG_AGENT_HOME"}
    shown = subprocess.run(
        [sys.executable, "-m", "soong_store", *backend.cli, "tree", sid],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "coordinator" in shown.stdout and "helper" in shown.stdout
    assert "the answer is 42" in shown.stdout
