"""``SoongSession.record_usage``: a run of the SDK recorded as a store run, with its usage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, set_tracing_disabled
from agents.items import ModelResponse
from agents.usage import Usage
from openai.types.responses.response_usage import InputTokensDetails

from soong_store import InvalidArgument, SessionStore
from soong_store.integrations.openai_agents import SoongSession
from tests.integrations.agents_support import ScriptedModel, run

set_tracing_disabled(True)


@dataclass
class CountingModel(ScriptedModel):
    """A scripted model whose every call reports 100 input tokens (30 cached), 20 output."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        response = await super().get_response(*args, **kwargs)
        details = InputTokensDetails(cached_tokens=30, cache_write_tokens=0)
        usage = Usage(
            requests=1,
            input_tokens=100,
            output_tokens=20,
            total_tokens=120,
            input_tokens_details=details,
        )
        return ModelResponse(output=response.output, usage=usage, response_id=None)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    async with SessionStore(home=tmp_path / "home") as opened:
        yield opened


async def test_each_run_is_recorded_with_the_usage_the_sdk_reports(store: SessionStore) -> None:
    session = SoongSession("usage", store=store)
    agent = Agent(name="helper", model=CountingModel(["one", "two"]))
    first = await run("run", agent, "hi", session=session)
    recorded = await session.record_usage(first, model="gpt-test")
    await session.record_usage(await run("run", agent, "again", session=session))
    assert recorded.status.value == "completed" and recorded.turn_count == 1
    assert recorded.usage == [
        {
            "model": "gpt-test",
            "input_tokens": 70,
            "output_tokens": 20,
            "cache_read_tokens": 30,
            "cache_write_tokens": 0,
        }
    ]
    assert recorded.metadata == {"openai-agents": {"last_agent": "helper"}}
    sid = await session.store_session_id()
    runs = await store.list_runs(sid)
    assert [r.run_id for r in runs][0] == recorded.run_id and len(runs) == 2
    assert runs[1].usage is not None and "model" not in runs[1].usage[0]  # a Model object
    rows = {row.key: row for row in await store.usage(by="model")}
    assert rows["gpt-test"].input_tokens == 70 and rows[None].cache_read_tokens == 30
    assert sum(row.runs for row in rows.values()) == 2


async def test_a_streamed_run_is_recorded_once_streamed(store: SessionStore) -> None:
    session = SoongSession("streamed", store=store)
    agent = Agent(name="helper", model=ScriptedModel(["streamed"]))
    result = await run("run_streamed", agent, "hi", session=session)
    recorded = await session.record_usage(result)
    assert recorded.turn_count == 1 and len(recorded.usage) == 1


async def test_a_thing_that_is_no_result_is_refused(store: SessionStore) -> None:
    session = SoongSession("refused", store=store)
    with pytest.raises(InvalidArgument, match="raw_responses"):
        await session.record_usage({"usage": 5})
    assert await store.list_sessions() == []
