"""``switch_node(sid, None)``: no active node, and the next root-agent node is a new root."""

from __future__ import annotations

import asyncio
import json

import pytest

from soong_store import BranchError, SessionArchived, SessionStore
from soong_store.cli import main
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import snapshot


@pytest.fixture
async def chat(store: SessionStore) -> dict[str, str]:
    session = await store.create_session(cwd=".")
    sid = session.session_id
    q = await store.append_node(sid, "user", "message", text("first question"), token_count=3)
    a = await store.append_node(sid, "assistant", "message", text("first answer"), token_count=4)
    return {"sid": sid, "q": q.node_id, "a": a.node_id, "agent": session.root_agent_id}


async def test_clearing_leaves_an_empty_path_and_a_null_event(
    store: SessionStore, chat: dict[str, str]
) -> None:
    sid = chat["sid"]
    session = await store.switch_node(sid, None)
    assert session.active_node_id is None
    assert await store.active_path(sid) == []
    view = await store.context(sid)
    assert view.nodes == [] and view.token_count == 0
    event = (await store.timeline(sid))[-1]
    assert event.event_type == "node_switched"
    assert event.node_id is None
    assert event.payload == {"from": chat["a"], "to": None}
    assert [n.node_id for n in await store.active_path(sid, chat["a"])] == [chat["q"], chat["a"]]


async def test_the_next_user_message_is_a_new_root(
    store: SessionStore, chat: dict[str, str]
) -> None:
    sid = chat["sid"]
    await store.switch_node(sid, None)
    edited = await store.append_node(sid, "user", "message", text("first question, edited"))
    assert edited.parent_id is None
    answer = await store.append_node(sid, "assistant", "message", text("another answer"))
    assert answer.parent_id == edited.node_id
    assert [n.node_id for n in await store.active_path(sid)] == [edited.node_id, answer.node_id]
    roots = [n.node_id for n in await store.list_nodes(sid) if n.parent_id is None]
    assert roots == [chat["q"], edited.node_id]
    assert [n.node_id for n in await store.children(sid, chat["q"])] == [chat["a"]]
    await store.switch_node(sid, chat["a"])  # the old branch is still there to go back to
    assert [n.node_id for n in await store.active_path(sid)] == [chat["q"], chat["a"]]


@pytest.mark.parametrize(
    ("role", "node_type"),
    [("assistant", "message"), ("tool", "message"), ("user", "compaction"), ("system", "message")],
)
async def test_a_new_root_must_be_a_user_message(
    store: SessionStore, chat: dict[str, str], role: str, node_type: str
) -> None:
    sid = chat["sid"]
    await store.switch_node(sid, None)
    before = snapshot(store)
    with pytest.raises(BranchError, match="new root"):
        await store.append_node(sid, role, node_type, text("x"))
    with pytest.raises(BranchError, match="new root"):
        async with store.transaction(sid) as tx:
            tx.add_node(role, node_type, text("x"))
            tx.add_node("user", "message", text("y"))
    assert snapshot(store) == before


async def test_a_unit_may_start_a_new_root_and_continue_it(
    store: SessionStore, chat: dict[str, str]
) -> None:
    sid = chat["sid"]
    await store.switch_node(sid, None)
    async with store.transaction(sid) as tx:
        root = tx.add_node("user", "message", text("again"))
        tx.add_node("assistant", "message", text("sure"))
        tx.add_node("user", "message", text("and?"))
    assert [n.parent_id for n in tx.nodes] == [None, root, tx.nodes[1].node_id]
    await store.switch_node(sid, None)
    with pytest.raises(BranchError):
        await store.append_node(sid, "assistant", "message", text("x"))


async def test_an_empty_session_takes_any_first_node_after_a_clear(store: SessionStore) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    await store.switch_node(sid, None)
    first = await store.append_node(sid, "system", "message", text("you are helpful"))
    assert first.parent_id is None


async def test_other_agents_roots_do_not_count(store: SessionStore) -> None:
    """A worker's tree is its own: the root agent's first node is not a branch of it."""
    sid = (await store.create_session(cwd=".")).session_id
    worker = await store.create_agent(sid, "sub")
    await store.append_node(sid, "user", "message", text("task"), agent_id=worker.agent_id)
    first = await store.append_node(sid, "assistant", "message", text("hello"))
    assert first.parent_id is None
    sub_second = await store.append_node(
        sid, "assistant", "message", text("done"), agent_id=worker.agent_id
    )
    assert sub_second.parent_id is not None


async def test_no_active_node_survives_reopening(backend: Backend, chat: dict[str, str]) -> None:
    sid = chat["sid"]
    async with backend.store() as other:
        await other.switch_node(sid, None)
    async with backend.store() as reopened:
        assert (await reopened.get_session(sid)).active_node_id is None
        assert await reopened.active_path(sid) == []
        with pytest.raises(BranchError):
            await reopened.append_node(sid, "assistant", "message", text("x"))
        new = await reopened.append_node(sid, "user", "message", text("fresh"))
        assert new.parent_id is None


async def test_an_archived_session_refuses_a_clear(
    store: SessionStore, chat: dict[str, str]
) -> None:
    await store.archive_session(chat["sid"])
    with pytest.raises(SessionArchived):
        await store.switch_node(chat["sid"], None)


def test_cli_switch_none_and_the_tree_of_several_roots(
    backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    async def seed() -> tuple[str, str]:
        async with backend.store() as store:
            sid = (await store.create_session(cwd=".")).session_id
            q = await store.append_node(sid, "user", "message", text("first question"))
            await store.append_node(sid, "assistant", "message", text("first answer"))
            return sid, q.node_id

    async def edit(sid: str) -> str:
        async with backend.store() as store:
            edited = await store.append_node(sid, "user", "message", text("edited question"))
            await store.append_node(sid, "assistant", "message", text("edited answer"))
            return edited.node_id

    def run(*args: str, code: int = 0) -> str:
        capsys.readouterr()
        assert main([*backend.cli, *args]) == code
        out, err = capsys.readouterr()
        return out + err

    sid, first = asyncio.run(seed())
    assert "no active node now" in run("switch", sid, "--none")
    assert "(none: the next message starts a new root)" in run("show", sid)
    assert "has no active node" in run("path", sid)
    assert "no active node: the next message" in run("tree", sid)
    assert json.loads(run("switch", sid, "--none", "--json"))["active_node_id"] is None
    assert "NODE or --none" in run("switch", sid, code=2)
    assert "NODE or --none" in run("switch", sid, "#1", "--none", code=2)
    edited = asyncio.run(edit(sid))
    lines = [line for line in run("tree", sid, "--width", "200").splitlines() if "#" in line]
    assert [line.split("#")[1].split()[0] for line in lines] == ["1", "2", "3", "4"]
    assert [line[0] for line in lines] == [" ", " ", "*", ">"]
    assert "edited answer" in lines[3]
    doc = json.loads(run("tree", sid, "--json"))
    assert [n["node_id"] for n in doc["nodes"] if n["parent_id"] is None] == [first, edited]
    assert "is now #1" in run("switch", sid, "#1")
