"""Owners and keys (DESIGN §17): a session's owner and its own name, found and listed by them."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from soong_store import InvalidArgument, SessionStore
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import execute, snapshot


async def test_owner_and_key_are_stored_and_read_back(store: SessionStore) -> None:
    made = await store.create_session("/p", owner="alice@example.com", key="ticket 42: login")
    assert (made.owner, made.key) == ("alice@example.com", "ticket 42: login")
    read = await store.get_session(made.session_id)
    assert (read.owner, read.key) == ("alice@example.com", "ticket 42: login")
    plain = await store.create_session("/p")
    assert (plain.owner, plain.key) == (None, None)


async def test_the_positional_arguments_are_kept(store: SessionStore) -> None:
    made = await store.create_session("/p", {"a": 1}, "orchestrator", owner="bob")
    assert made.metadata == {"a": 1} and made.owner == "bob"


async def test_find_session_finds_a_key_per_owner(store: SessionStore) -> None:
    alice = await store.create_session("/p", owner="alice", key="k")
    bob = await store.create_session("/p", owner="bob", key="k")
    nobody = await store.create_session("/p", key="k")
    assert (await store.find_session("k", owner="alice")) == alice
    found = await store.find_session("k", owner="bob")
    assert found is not None and found.session_id == bob.session_id
    found = await store.find_session("k")
    assert found is not None and found.session_id == nobody.session_id
    assert await store.find_session("k", owner="carol") is None
    assert await store.find_session("other", owner="alice") is None


@pytest.mark.parametrize("owner", ["alice", None])
async def test_a_key_taken_by_the_same_owner_is_refused(
    store: SessionStore, owner: str | None
) -> None:
    first = await store.create_session("/p", owner=owner, key="same")
    before = snapshot(store)
    with pytest.raises(InvalidArgument, match="'same'") as caught:
        await store.create_session("/p", owner=owner, key="same")
    assert caught.value.context["session_id"] == first.session_id
    assert snapshot(store) == before
    assert len(await store.list_sessions()) == 1


async def test_sessions_without_a_key_never_clash(store: SessionStore) -> None:
    for owner in ("alice", "alice", None, None):
        await store.create_session("/p", owner=owner)
    assert len(await store.list_sessions()) == 4


async def test_concurrent_creates_of_one_key_make_one_session(store: SessionStore) -> None:
    results = await asyncio.gather(
        *(store.create_session("/p", owner="alice", key="race") for _ in range(6)),
        return_exceptions=True,
    )
    made = [r for r in results if not isinstance(r, BaseException)]
    assert len(made) == 1
    assert all(isinstance(r, InvalidArgument) for r in results if r not in made)


async def test_two_stores_creating_one_key_at_once_make_one_session(
    store: SessionStore, backend: Backend
) -> None:
    """Two writers (two processes or hosts in production): the database keeps the key unique."""
    async with backend.store() as other:
        results = await asyncio.gather(
            *(s.create_session("/p", owner=None, key="race") for s in (store, other) * 3),
            return_exceptions=True,
        )
    made = [r for r in results if not isinstance(r, BaseException)]
    assert len(made) == 1, results
    assert all(isinstance(r, InvalidArgument) for r in results if r not in made)
    assert len(await store.list_sessions()) == 1


_ROW = (
    "INSERT INTO sessions (session_id, cwd, root_agent_id, status, created_at, updated_at,"
    " owner, {key}) VALUES (:sid, '/p', :agent, 'active', :now, :now, :owner, :key)"
)


@pytest.mark.parametrize("owner", ["alice", None])
async def test_the_database_itself_refuses_a_second_key(
    store: SessionStore, owner: str | None
) -> None:
    """Past every check of the store (another writer's insert): the unique index refuses."""
    first = await store.create_session("/p", owner=owner, key="k")
    quoted = '"key"'
    params: dict[str, Any] = {
        "sid": "sess_20260101_000000_beef",
        "agent": first.root_agent_id,
        "now": "2026-01-01T00:00:00.000000+00:00",
        "owner": owner,
        "key": "k",
    }
    with pytest.raises(Exception, match="(?i)unique"):
        execute(store, _ROW.format(key=quoted), params)
    execute(store, _ROW.format(key=quoted), {**params, "key": "other"})


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"owner": ""}, "owner ''"),
        ({"owner": "a b"}, "owner 'a b'"),
        ({"owner": "x" * 129}, "owner"),
        ({"owner": 7}, "owner 7"),
        ({"owner": "ālice"}, "owner 'ālice'"),
        ({"key": ""}, "key ''"),
        ({"key": "line\nbreak"}, "key 'line\\\\nbreak'"),
        ({"key": "k" * 257}, "key"),
        ({"key": b"bytes"}, "key b'bytes'"),
        ({"key": "\ud800"}, "key"),
    ],
)
async def test_bad_owners_and_keys_are_refused(
    store: SessionStore, arguments: dict[str, Any], named: str
) -> None:
    before = snapshot(store)
    with pytest.raises(InvalidArgument, match=named):
        await store.create_session("/p", **arguments)
    assert snapshot(store) == before
    if "key" in arguments:
        with pytest.raises(InvalidArgument, match=named):
            await store.find_session(arguments["key"])
    else:
        with pytest.raises(InvalidArgument, match=named):
            await store.list_sessions(owner=arguments["owner"])


async def test_the_longest_owner_and_key_are_taken(store: SessionStore) -> None:
    made = await store.create_session("/p", owner="o" * 128, key="k" * 256)
    assert await store.find_session("k" * 256, owner="o" * 128) == made


async def test_listing_filters_by_owner_and_cwd(store: SessionStore) -> None:
    a1 = await store.create_session("/a", owner="alice")
    b1 = await store.create_session("/b", owner="bob")
    a2 = await store.create_session("/b", owner="alice")
    n1 = await store.create_session("/a")

    async def ids(**filters: Any) -> list[str]:
        return [s.session_id for s in await store.list_sessions(**filters)]

    assert await ids(owner="alice") == [a2.session_id, a1.session_id]
    assert await ids(owner="bob") == [b1.session_id]
    assert await ids(cwd="/a") == [n1.session_id, a1.session_id]
    assert await ids(cwd="/b", owner="alice") == [a2.session_id]
    assert await ids(owner="carol") == []
    await store.archive_session(a1.session_id)
    assert await ids(owner="alice", status="active") == [a2.session_id]


async def test_listing_filters_by_when_it_was_updated(store: SessionStore) -> None:
    old = await store.create_session("/p", owner="alice")
    new = await store.create_session("/p", owner="alice")
    await store.append_node(new.session_id, "user", "message", text("later"))
    newer = await store.get_session(new.session_id)
    middle = old.updated_at + (newer.updated_at - old.updated_at) / 2

    async def ids(**filters: Any) -> list[str]:
        return [s.session_id for s in await store.list_sessions(owner="alice", **filters)]

    assert await ids(updated_after=middle) == [new.session_id]
    assert await ids(updated_before=middle) == [old.session_id]
    assert await ids(updated_after=old.updated_at) == [new.session_id]  # exclusive
    assert await ids(updated_before=old.updated_at) == []
    east = middle.astimezone(timezone(timedelta(hours=9)))  # any zone means the same instant
    assert await ids(updated_after=east) == [new.session_id]


@pytest.mark.parametrize("bad", [datetime(2026, 1, 1), "2026-01-01", 0])
async def test_a_bound_must_be_an_aware_datetime(store: SessionStore, bad: object) -> None:
    with pytest.raises(InvalidArgument, match="updated_after"):
        await store.list_sessions(updated_after=bad)  # type: ignore[arg-type]


async def test_filtered_pages_by_key_cover_the_listing_once(store: SessionStore) -> None:
    mine = [(await store.create_session("/p", owner="alice")).session_id for _ in range(5)]
    for _ in range(3):
        await store.create_session("/p", owner="bob")
    paged: list[str] = []
    page = await store.list_sessions(owner="alice", limit=2)
    while page:
        paged += [s.session_id for s in page]
        page = await store.list_sessions(owner="alice", limit=2, after=page[-1])
    assert paged == list(reversed(mine))


async def test_a_fork_keeps_the_owner_not_the_key(store: SessionStore) -> None:
    source = await store.create_session("/p", owner="alice", key="k")
    node = await store.append_node(source.session_id, "user", "message", text("hi"))
    fork = await store.fork_session(source.session_id, node.node_id)
    assert (fork.owner, fork.key) == ("alice", None)


async def test_a_deleted_session_lets_go_of_its_key(store: SessionStore) -> None:
    first = await store.create_session("/p", owner="alice", key="k")
    await store.delete_session(first.session_id)
    assert await store.find_session("k", owner="alice") is None
    again = await store.create_session("/p", owner="alice", key="k")
    assert again.session_id != first.session_id
