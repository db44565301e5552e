"""``store.scoped(owner)``: one owner's sessions, and nothing of anyone else's (DESIGN §17)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from soong_store import InvalidArgument, NotFound, ScopedStore, SessionStore
from tests.conftest import text
from tests.helpers import snapshot

STORE_LEVEL = {"open", "close", "gc", "scoped"}
"""SessionStore's public methods that are not about one session: a scoped handle has none."""


def public_methods(cls: type) -> set[str]:
    return {name for name, value in vars_of(cls).items() if callable(value)}


def vars_of(cls: type) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass is object:
            continue
        found.update({k: v for k, v in vars(klass).items() if not k.startswith("_")})
    return found


def test_every_session_level_method_has_a_scoped_twin() -> None:
    """A method added to SessionStore later, without its scoped twin, fails here."""
    wanted = public_methods(SessionStore) - STORE_LEVEL
    assert public_methods(ScopedStore) == wanted


@pytest.mark.parametrize("name", sorted(public_methods(ScopedStore)))
def test_a_scoped_method_takes_the_store_methods_arguments_but_the_owner(name: str) -> None:
    store = inspect.signature(getattr(SessionStore, name)).parameters
    scoped = inspect.signature(getattr(ScopedStore, name)).parameters
    assert [p for p in scoped if p != "self"] == [p for p in store if p not in ("self", "owner")]


@dataclass
class Ids:
    """A session and what is reached by id inside it."""

    session_id: str
    agent_id: str
    run_id: str
    node_id: str
    artifact_id: str


UNKNOWN = Ids(
    "sess_20200101_000000_dead",
    "agent_unknown0000000000000000",
    "run_unknown00000000000000000",
    "node_unknown0000000000000000",
    "art_unknown00000000000000000",
)

Call = Callable[[ScopedStore, Ids], Awaitable[Any]]


async def _transaction(scoped: ScopedStore, ids: Ids) -> None:
    async with scoped.transaction(ids.session_id) as tx:
        tx.add_event("note")


CALLS: dict[str, Call] = {
    "get_session": lambda s, i: s.get_session(i.session_id),
    "archive_session": lambda s, i: s.archive_session(i.session_id),
    "delete_session": lambda s, i: s.delete_session(i.session_id),
    "fork_session": lambda s, i: s.fork_session(i.session_id, i.node_id),
    "create_agent": lambda s, i: s.create_agent(i.session_id, "sub", i.agent_id),
    "get_agent": lambda s, i: s.get_agent(i.agent_id),
    "list_agents": lambda s, i: s.list_agents(i.session_id),
    "update_agent": lambda s, i: s.update_agent(i.agent_id, metadata={"x": 1}),
    "start_run": lambda s, i: s.start_run(i.session_id, i.agent_id),
    "get_run": lambda s, i: s.get_run(i.run_id),
    "list_runs": lambda s, i: s.list_runs(i.session_id),
    "update_run": lambda s, i: s.update_run(i.run_id, turn_count=3),
    "finish_run": lambda s, i: s.finish_run(i.run_id, "completed", "completed"),
    "transaction": _transaction,
    "append_node": lambda s, i: s.append_node(i.session_id, "user", "message", text("x")),
    "append_event": lambda s, i: s.append_event(i.session_id, "note"),
    "switch_node": lambda s, i: s.switch_node(i.session_id, i.node_id),
    "get_node": lambda s, i: s.get_node(i.session_id, i.node_id),
    "list_nodes": lambda s, i: s.list_nodes(i.session_id),
    "children": lambda s, i: s.children(i.session_id, i.node_id),
    "active_path": lambda s, i: s.active_path(i.session_id),
    "context": lambda s, i: s.context(i.session_id, max_tokens=1000),
    "redact_node": lambda s, i: s.redact_node(i.session_id, i.node_id, reason="leaked"),
    "timeline": lambda s, i: s.timeline(i.session_id),
    "put_artifact": lambda s, i: s.put_artifact(i.session_id, b"data"),
    "get_artifact": lambda s, i: s.get_artifact(i.artifact_id),
    "list_artifacts": lambda s, i: s.list_artifacts(i.session_id),
    "read_artifact": lambda s, i: s.read_artifact(i.artifact_id),
    "task_dag": lambda s, i: s.task_dag(i.session_id, "plan"),
}
"""Every scoped call that names a session or a row of one, as it would reach another's."""

UNSCOPED = {
    "create_session",
    "find_session",
    "list_sessions",
    "search",
    "apply_retention",
    "usage",
}
"""The scoped calls that name no session: tested apart (they only ever see the owner's)."""


def test_every_scoped_call_is_tried_on_another_owners_session() -> None:
    assert set(CALLS) | UNSCOPED == public_methods(ScopedStore)


async def filled(store: SessionStore, owner: str | None) -> Ids:
    session = await store.create_session("/p", owner=owner)
    sid = session.session_id
    run = await store.start_run(sid, session.root_agent_id)
    node = await store.append_node(sid, "user", "message", text("secret words"), run_id=run.run_id)
    art = await store.put_artifact(sid, b"secret bytes", node_id=node.node_id)
    return Ids(sid, session.root_agent_id, run.run_id, node.node_id, art.artifact_id)


def masked(error: BaseException, ids: Ids) -> tuple[type, str]:
    message = str(error)
    for name, value in vars(ids).items():
        message = message.replace(value, f"<{name}>")
    return type(error), message


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("other_owner", ["bob", None])
async def test_another_owners_session_is_not_found_as_an_unknown_one(
    store: SessionStore, name: str, other_owner: str | None
) -> None:
    theirs = await filled(store, other_owner)
    scoped = store.scoped("alice")
    before = snapshot(store)
    with pytest.raises(NotFound) as foreign:
        await CALLS[name](scoped, theirs)
    assert snapshot(store) == before
    with pytest.raises(NotFound) as unknown:
        await CALLS[name](scoped, UNKNOWN)
    assert masked(foreign.value, theirs) == masked(unknown.value, UNKNOWN)
    assert foreign.value.context.keys() == unknown.value.context.keys()


async def test_the_owner_works_on_its_own_sessions(store: SessionStore) -> None:
    scoped = store.scoped("alice")
    made = await scoped.create_session("/p", key="chat")
    assert made.owner == "alice"
    assert await scoped.find_session("chat") == made
    sid = made.session_id
    node = await scoped.append_node(sid, "user", "message", text("hello"))
    assert [n.node_id for n in (await scoped.context(sid)).nodes] == [node.node_id]
    fork = await scoped.fork_session(sid, node.node_id)
    assert fork.owner == "alice"
    assert {s.session_id for s in await scoped.list_sessions()} == {sid, fork.session_id}
    art = await scoped.put_artifact(sid, b"bytes")
    assert await scoped.read_artifact(art.artifact_id) == b"bytes"
    await scoped.delete_session(fork.session_id)
    with pytest.raises(NotFound):
        await scoped.get_session(fork.session_id)


async def test_listing_and_finding_see_only_the_owners_sessions(store: SessionStore) -> None:
    mine = await store.create_session("/p", owner="alice", key="k")
    await store.create_session("/p", owner="bob", key="k")
    await store.create_session("/p", key="k")
    scoped = store.scoped("alice")
    assert [s.session_id for s in await scoped.list_sessions()] == [mine.session_id]
    assert [s.session_id for s in await scoped.list_sessions(cwd="/p")] == [mine.session_id]
    assert await scoped.find_session("k") == mine
    assert await store.scoped("carol").list_sessions() == []
    assert await store.scoped("carol").find_session("k") is None


async def test_a_search_finds_only_the_owners_nodes_and_its_page_stays_full(
    store: SessionStore,
) -> None:
    mine = await store.create_session("/p", owner="alice")
    for i in range(3):
        await store.append_node(mine.session_id, "user", "message", text(f"needle {i}"))
    for owner in ("bob", None):  # newer, and many more of them
        theirs = await store.create_session("/p", owner=owner)
        for i in range(10):
            await store.append_node(theirs.session_id, "user", "message", text(f"needle {i}"))
    scoped = store.scoped("alice")
    hits = await scoped.search("needle", limit=3)
    assert len(hits) == 3 and {h.session_id for h in hits} == {mine.session_id}
    assert await scoped.search("needle", session_id=theirs.session_id) == []
    assert len(await store.search("needle", limit=50)) == 23


@pytest.mark.parametrize("bad", ["", "a b", None, 3])
def test_a_bad_owner_is_refused(store: SessionStore, bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="owner"):
        store.scoped(bad)


async def test_a_scoped_create_cannot_take_another_owners_key_from_them(
    store: SessionStore,
) -> None:
    await store.create_session("/p", owner="bob", key="k")
    mine = await store.scoped("alice").create_session("/p", key="k")
    assert (mine.owner, mine.key) == ("alice", "k")


INSIDE: dict[str, Callable[[ScopedStore, str, Ids], Awaitable[Any]]] = {
    "parent agent": lambda s, sid, i: s.create_agent(sid, "sub", parent_agent_id=i.agent_id),
    "created by run": lambda s, sid, i: s.create_agent(sid, "sub", created_by_run_id=i.run_id),
    "run of agent": lambda s, sid, i: s.start_run(sid, i.agent_id),
    "node's run": lambda s, sid, i: s.append_node(
        sid, "user", "message", text("x"), run_id=i.run_id
    ),
    "node's agent": lambda s, sid, i: s.append_node(
        sid, "user", "message", text("x"), agent_id=i.agent_id
    ),
    "parent node": lambda s, sid, i: s.append_node(
        sid, "user", "message", text("x"), parent_id=i.node_id
    ),
    "switch": lambda s, sid, i: s.switch_node(sid, i.node_id),
    "fork": lambda s, sid, i: s.fork_session(sid, i.node_id),
    "event's node": lambda s, sid, i: s.append_event(sid, "note", node_id=i.node_id),
    "artifact's node": lambda s, sid, i: s.put_artifact(sid, b"x", node_id=i.node_id),
    "artifact ref": lambda s, sid, i: s.append_node(
        sid, "user", "message", [{"type": "artifact_ref", "artifact_id": i.artifact_id}]
    ),
}


@pytest.mark.parametrize("name", sorted(INSIDE))
async def test_another_owners_rows_named_inside_an_own_session_are_not_found(
    store: SessionStore, name: str
) -> None:
    """The store's own rule (ids named beside a session are that session's) holds the scope."""
    theirs = await filled(store, "bob")
    scoped = store.scoped("alice")
    mine = await scoped.create_session("/p")
    await scoped.append_node(mine.session_id, "user", "message", text("mine"))
    before = snapshot(store)
    with pytest.raises(NotFound) as foreign:
        await INSIDE[name](scoped, mine.session_id, theirs)
    assert snapshot(store) == before
    with pytest.raises(NotFound) as unknown:
        await INSIDE[name](scoped, mine.session_id, UNKNOWN)
    assert masked(foreign.value, theirs) == masked(unknown.value, UNKNOWN)
