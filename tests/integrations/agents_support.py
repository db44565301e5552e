"""Helpers for the OpenAI Agents SDK tests: a scripted model and a runner of the three run modes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, Runner
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseOutputMessage,
    ResponseOutputText,
)


def reply(text: str, n: int) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{n}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


@dataclass
class ScriptedModel(Model):
    """Answers each call with the next text of ``script``; remembers each call's input."""

    script: list[str] = field(default_factory=list)
    inputs: list[list[TResponseInputItem]] = field(default_factory=list)

    def _next(self, input: str | list[TResponseInputItem]) -> ResponseOutputMessage:
        self.inputs.append(
            [{"role": "user", "content": input}] if isinstance(input, str) else input
        )
        return reply(self.script.pop(0), len(self.inputs))

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        message = self._next(args[1] if len(args) > 1 else kwargs["input"])
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    async def stream_response(  # type: ignore[override]
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[TResponseStreamEvent]:
        message = self._next(args[1] if len(args) > 1 else kwargs["input"])
        response = Response(
            id="resp_1",
            created_at=0,
            model="scripted",
            object="response",
            output=[message],
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=[],
        )
        yield ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=0
        )


def _run_sync(agent: Agent[Any], text: str, **kwargs: Any) -> Any:
    """``Runner.run_sync`` in a thread, on a loop of that thread's own, closed afterwards."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return Runner.run_sync(agent, text, **kwargs)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


async def run(mode: str, agent: Agent[Any], text: str, **kwargs: Any) -> Any:
    """One turn with ``Runner.run``, ``run_sync`` (in a thread of its own) or ``run_streamed``."""
    if mode == "run":
        return await Runner.run(agent, text, **kwargs)
    if mode == "run_sync":
        return await asyncio.to_thread(_run_sync, agent, text, **kwargs)
    result = Runner.run_streamed(agent, text, **kwargs)
    async for _ in result.stream_events():
        pass
    return result
