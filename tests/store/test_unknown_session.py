"""A write naming a well-formed session id that does not exist is ``NotFound``, never damage."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from soong_store import NotFound, SessionStore, StorageError
from soong_store.model.ids import new_id
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import events_table, execute, nodes_table, snapshot

UNKNOWN = "sess_20240101_000000_abcd"
NO_SUCH_TABLE = {"sqlite": "no such table", "postgresql": r"relation \"nodes_\w+\" does not exist"}
"""What each backend's driver says of a missing table (the store passes it on)."""


async def _in_transaction(store: SessionStore) -> None:
    async with store.transaction(UNKNOWN) as tx:
        tx.add_node("user", "message", text("x"))


def writes(seeded: dict[str, str]) -> dict[str, Callable[[SessionStore], Awaitable[Any]]]:
    return {
        "append_node": lambda s: s.append_node(UNKNOWN, "user", "message", text("x")),
        "append_event": lambda s: s.append_event(UNKNOWN, "e"),
        "transaction": _in_transaction,
        "switch_node": lambda s: s.switch_node(UNKNOWN, seeded["node"]),
        "create_agent": lambda s: s.create_agent(UNKNOWN, "sub"),
        "start_run": lambda s: s.start_run(UNKNOWN, seeded["agent"]),
        "put_artifact": lambda s: s.put_artifact(UNKNOWN, b"bytes", filename="a.txt"),
        "task_dag": lambda s: s.task_dag(UNKNOWN, "plan"),
    }


@pytest.fixture
async def seeded(store: SessionStore) -> dict[str, str]:
    session = await store.create_session(cwd=".")
    node = await store.append_node(session.session_id, "user", "message", text("q"))
    return {"agent": session.root_agent_id, "node": node.node_id}


@pytest.mark.parametrize("name", sorted(writes({"node": "", "agent": ""})))
async def test_a_write_to_an_unknown_session_is_not_found(
    store: SessionStore, home: Path, seeded: dict[str, str], name: str
) -> None:
    before = snapshot(store)
    with pytest.raises(NotFound, match=UNKNOWN) as raised:
        await writes(seeded)[name](store)
    assert raised.value.context["session_id"] == UNKNOWN
    assert snapshot(store) == before
    leftovers = [p for p in (home / "artifacts").rglob("*") if p.is_file()]
    assert leftovers == []


async def test_unknown_sessions_among_good_writes_harm_no_other(
    store: SessionStore, seeded: dict[str, str]
) -> None:
    """In one batch of the writer, the unknown session's job fails alone."""
    sid = (await store.list_sessions())[0].session_id
    results = await asyncio.gather(
        store.append_event(sid, "before"),
        store.append_event(UNKNOWN, "lost"),
        store.append_event(sid, "after"),
        return_exceptions=True,
    )
    assert isinstance(results[1], NotFound)
    assert [e.event_type for e in await store.timeline(sid)][-2:] == ["before", "after"]


async def test_a_known_session_without_its_tables_is_still_damage(
    store: SessionStore, backend: Backend
) -> None:
    sid = (await store.create_session(cwd=".")).session_id
    await store.append_event(sid, "first write: the pair exists")
    execute(backend, f'DROP TABLE "{events_table(sid)}"')  # first: it refers to the nodes
    execute(backend, f'DROP TABLE "{nodes_table(sid)}"')
    with pytest.raises(StorageError, match=NO_SUCH_TABLE[backend.name]):
        await store.append_event(sid, "e", node_id=new_id("node"))
