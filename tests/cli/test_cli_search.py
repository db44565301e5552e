"""``soong-store search``: each hit's place, the command that opens it, JSON, paging, errors."""

from __future__ import annotations

import asyncio
import shlex

import pytest

from tests.backends import Backend
from tests.cli.test_cli import InProcess, cli, location, one_error_line
from tests.conftest import text


async def write(backend: Backend) -> dict[str, str]:
    async with backend.store() as store:
        sid = (await store.create_session(cwd=".")).session_id
        root = await store.append_node(sid, "user", "message", text("ask about the kestrel"))
        side = await store.append_node(sid, "assistant", "message", text("kestrel, first try"))
        await store.append_node(sid, "user", "message", text("retry"), parent_id=root.node_id)
        sub = await store.create_agent(sid, "sub")
        await store.append_node(
            sid, "assistant", "message", text("the worker saw a kestrel"), agent_id=sub.agent_id
        )
    return {"sid": sid, "root": root.node_id, "side": side.node_id}


def test_each_hit_says_where_it_is_and_how_to_open_it(
    backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = asyncio.run(write(backend))
    run = InProcess(capsys, backend)
    doc = run.json("search", "kestrel")
    hits = {hit["node_seq"]: hit for hit in doc["hits"]}
    assert set(hits) == {1, 2, 4}
    assert hits[1]["on_active_path"] and hits[1]["agent"] == "main"
    assert not hits[2]["on_active_path"] and hits[2]["node_id"] == ids["side"]
    assert hits[4]["agent"] == "sub1" and hits[4]["agent_type"] == "sub"
    opened = shlex.split(hits[2]["open"])
    assert opened[0] == "soong-store" and opened[-3:] == ["path", ids["sid"], "#2"]
    assert opened[1:-3] == location(backend)
    path = run.json(*opened[1 + len(location(backend)) :])
    assert path["node_id"] == ids["side"]
    shown = run("search", "kestrel", "--limit", "2").splitlines()
    assert len(shown) == 7 and shown[-1] == "more may follow: --offset 2"
    assert shown[0].startswith(f"1. {ids['sid']} #") and "[kestrel]" in shown[1]
    rest = run("search", "kestrel", "--offset", "2")
    assert rest.startswith("3. ") and "more may follow" not in rest
    assert (
        "off the active path" in "\n".join(shown) + rest
    )  # the side branch's hit, wherever ranked
    assert run("search", "kestrel", "--offset", "3") == "no hits after the first 3\n"


def test_filters_and_bad_input(backend: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    ids = asyncio.run(write(backend))
    run = InProcess(capsys, backend)
    users = run.json("search", "kestrel", "--role", "user")["hits"]
    assert [hit["node_id"] for hit in users] == [ids["root"]]
    assert run.json("search", "kestrel", "--session", ids["sid"])["hits"]
    assert run("search", '"NEAR(" OR *') == "no hits\n"
    done = cli(backend, "search", "kestrel", "--session", "bad id")
    assert "bad id" in one_error_line(done, 2)
