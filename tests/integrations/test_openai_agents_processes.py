"""SoongSession across processes: one SDK id is one session, each pop pops once, history lasts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.integrations.openai_agents import SoongSession

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

PRELUDE = """\
import asyncio, json, os, sys, time
from pathlib import Path
from soong_store.integrations.openai_agents import SoongSession
home, go = Path(sys.argv[1]), Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
"""


def start(tmp_path: Path, body: str, count: int, *args: str) -> list[subprocess.Popen[str]]:
    script = tmp_path / "child.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    go = tmp_path / "go"
    return [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / "home"), str(go), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        for _ in range(count)
    ]


def release(tmp_path: Path, children: list[subprocess.Popen[str]]) -> list[Any]:
    time.sleep(1.0)  # let every child import and reach the start line
    (tmp_path / "go").touch()
    out = []
    for child in children:
        stdout, stderr = child.communicate(timeout=120)
        assert child.returncode == 0, stderr
        out.append(json.loads(stdout))
    return out


OPEN = """\
async def main():
    async with SoongSession("shared-id", home=home) as session:
        print(json.dumps(await session.store_session_id()))
asyncio.run(main())
"""


@pytest.mark.parametrize("trial", range(2))
async def test_processes_opening_one_new_id_share_one_session(tmp_path: Path, trial: int) -> None:
    found = release(tmp_path, start(tmp_path, OPEN, 4))
    assert len(set(found)) == 1
    async with SessionStore(home=tmp_path / "home") as store:
        assert [s.session_id for s in await store.list_sessions()] == found[:1]


POP = """\
async def main():
    async with SoongSession("popped", home=home) as session:
        items = [await session.pop_item() for _ in range(int(sys.argv[3]))]
        print(json.dumps([i["content"] for i in items]))
asyncio.run(main())
"""


async def test_concurrent_pops_in_two_processes_pop_each_item_once(tmp_path: Path) -> None:
    items = [{"role": "user", "content": f"m{i}"} for i in range(30)]
    async with SoongSession("popped", home=tmp_path / "home") as session:
        await session.add_items(items)
    popped = release(tmp_path, start(tmp_path, POP, 2, "15"))
    flat = [content for one in popped for content in one]
    assert sorted(flat) == sorted(i["content"] for i in items)
    for one in popped:  # each process saw the history shrink from its end
        assert one == sorted(one, key=lambda c: -int(c[1:]))
    async with SoongSession("popped", home=tmp_path / "home") as session:
        assert await session.get_items() == []


TURN = """\
from agents import Agent, Runner, set_tracing_disabled
from tests.integrations.agents_support import ScriptedModel
set_tracing_disabled(True)
async def main():
    model = ScriptedModel([sys.argv[4]])
    async with SoongSession("runner", home=home) as session:
        result = await Runner.run(Agent(name="a", model=model), sys.argv[3], session=session)
    print(json.dumps([result.final_output, [i.get("content") for i in model.inputs[0]]]))
asyncio.run(main())
"""


async def test_a_runner_conversation_goes_on_in_another_process(tmp_path: Path) -> None:
    [first] = release(tmp_path, start(tmp_path, TURN, 1, "Where is the bridge?", "San Francisco"))
    (tmp_path / "go").unlink()
    [second] = release(tmp_path, start(tmp_path, TURN, 1, "Which state?", "California"))
    assert first == ["San Francisco", ["Where is the bridge?"]]
    assert second[0] == "California"
    assert second[1][0] == "Where is the bridge?" and second[1][-1] == "Which state?"
    assert len(second[1]) == 3
    async with SoongSession("runner", home=tmp_path / "home") as session:
        assert len(await session.get_items()) == 4
