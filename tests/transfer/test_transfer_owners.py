"""Export and import carry a session's owner and key; a key taken by the same owner is refused."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from soong_store import InvalidArgument, SessionStore
from soong_store.check.run import check_store
from soong_store.transfer import export_session, import_session
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import snapshot


async def exported(store: SessionStore, sid: str) -> list[dict[str, Any]]:
    out = io.StringIO()
    await export_session(store, sid, out)
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def encode(lines: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(line) for line in lines]


async def owned(store: SessionStore) -> str:
    made = await store.create_session("/p", owner="alice", key="chat 7")
    await store.append_node(made.session_id, "user", "message", text("hi"))
    return made.session_id


async def test_owner_and_key_travel_with_the_session(
    store: SessionStore, new_backend: Callable[[str], Backend]
) -> None:
    sid = await owned(store)
    lines = await exported(store, sid)
    assert (lines[1]["row"]["owner"], lines[1]["row"]["key"]) == ("alice", "chat 7")
    async with new_backend("other").store() as other:
        await import_session(other, encode(lines))
        found = await other.find_session("chat 7", owner="alice")
        assert found is not None and found.session_id == sid
        report = await check_store(other)
        assert report.ok, report.problems


async def test_a_copy_beside_a_keyed_original_is_refused_naming_the_key(
    store: SessionStore, backend: Backend
) -> None:
    sid = await owned(store)
    lines = await exported(store, sid)
    before = snapshot(backend)
    with pytest.raises(InvalidArgument, match="key 'chat 7'"):
        await import_session(store, encode(lines), new_id=True)
    assert snapshot(backend) == before


async def test_an_export_from_before_owners_imports_without_them(
    store: SessionStore, new_backend: Callable[[str], Backend]
) -> None:
    sid = await owned(store)
    lines = await exported(store, sid)
    for name in ("owner", "key"):
        del lines[1]["row"][name]
    async with new_backend("other").store() as other:
        await import_session(other, encode(lines))
        again = await other.get_session(sid)
        assert (again.owner, again.key) == (None, None)


@pytest.mark.parametrize(("column", "value"), [("owner", "a b"), ("key", "tab\there"), ("key", 5)])
async def test_a_bad_owner_or_key_in_the_file_is_refused(
    store: SessionStore, new_backend: Callable[[str], Backend], column: str, value: object
) -> None:
    lines = await exported(store, await owned(store))
    lines[1]["row"][column] = value
    target = new_backend("other")
    async with target.store() as other:
        before = snapshot(target)
        with pytest.raises(InvalidArgument, match=f"session.{column}"):
            await import_session(other, encode(lines))
        assert snapshot(target) == before
