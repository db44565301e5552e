"""``apply_retention``: idle sessions archived, then deleted as ``delete_session`` deletes them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from soong_store import (
    InvalidArgument,
    NotFound,
    RetentionPolicy,
    RetentionReport,
    SessionStore,
)
from soong_store.store import run_write
from soong_store.write import lifecycle
from tests.conftest import text
from tests.helpers import execute, snapshot

POLICY = RetentionPolicy(archive_after=timedelta(days=30), delete_after=timedelta(days=180))


def age(store: SessionStore, session_id: str, days: float) -> None:
    """Make the session look last updated ``days`` ago (behind the store's back)."""
    when = (datetime.now(UTC) - timedelta(days=days)).isoformat(timespec="microseconds")
    execute(
        store,
        "UPDATE sessions SET updated_at = :when WHERE session_id = :sid",
        {"when": when, "sid": session_id},
    )


async def session(
    store: SessionStore, days: float, owner: str | None = None, words: str = ""
) -> str:
    made = await store.create_session("/p", owner=owner)
    sid = made.session_id
    await store.append_node(sid, "user", "message", text(words or f"retention {sid}"))
    age(store, sid, days)
    return sid


async def test_old_sessions_are_deleted_idle_ones_archived_fresh_ones_kept(
    store: SessionStore, home: Path
) -> None:
    old = await session(store, 200, words="needle old")
    art = await store.put_artifact(old, b"old bytes", filename="old.txt")
    age(store, old, 200)
    idle = await session(store, 40)
    fresh = await session(store, 1)
    report = await store.apply_retention(POLICY)
    assert report == RetentionReport(archived=[idle], deleted=[old])
    with pytest.raises(NotFound):
        await store.get_session(old)
    assert await store.search("needle") == []
    assert not (home / "artifacts" / art.path).exists()
    assert (await store.get_session(idle)).status == "archived"
    assert (await store.get_session(fresh)).status == "active"
    again = await store.apply_retention(POLICY)  # archiving was an update: nothing more to do
    assert again == RetentionReport()


async def test_a_dry_run_reports_and_changes_nothing(store: SessionStore) -> None:
    old, idle = await session(store, 200), await session(store, 40)
    await session(store, 1)
    before = snapshot(store)
    report = await store.apply_retention(POLICY, dry_run=True)
    assert report == RetentionReport(archived=[idle], deleted=[old])
    assert snapshot(store) == before


async def test_a_dry_run_does_not_report_to_archive_what_it_would_delete(
    store: SessionStore,
) -> None:
    old = await session(store, 200)
    report = await store.apply_retention(POLICY, dry_run=True)
    assert report == RetentionReport(archived=[], deleted=[old])


async def test_an_owners_policy_touches_only_that_owners_sessions(store: SessionStore) -> None:
    mine = await session(store, 200, owner="alice")
    theirs = await session(store, 200, owner="bob")
    nobodys = await session(store, 200)
    report = await store.apply_retention(
        RetentionPolicy(delete_after=timedelta(days=1), owner="alice")
    )
    assert report == RetentionReport(deleted=[mine])
    assert {s.session_id for s in await store.list_sessions()} == {theirs, nobodys}


async def test_only_the_steps_given_are_taken(store: SessionStore) -> None:
    old, idle = await session(store, 200), await session(store, 40)
    report = await store.apply_retention(RetentionPolicy(archive_after=timedelta(days=30)))
    assert report == RetentionReport(archived=[old, idle])  # oldest first
    assert await store.apply_retention(RetentionPolicy()) == RetentionReport()


async def test_an_archived_session_is_not_archived_again(store: SessionStore) -> None:
    sid = await session(store, 40)
    await store.archive_session(sid)
    age(store, sid, 40)
    assert await store.apply_retention(RetentionPolicy(archive_after=timedelta(days=30))) == (
        RetentionReport()
    )


async def test_the_files_a_fork_still_names_stay(store: SessionStore) -> None:
    source = (await store.create_session("/p")).session_id
    art = await store.put_artifact(source, b"shared bytes", filename="a.txt")
    node = await store.append_node(
        source, "user", "message", [{"type": "artifact_ref", "artifact_id": art.artifact_id}]
    )
    fork = await store.fork_session(source, node.node_id)
    age(store, source, 200)
    assert (await store.apply_retention(POLICY)).deleted == [source]
    (copied,) = await store.list_artifacts(fork.session_id)
    assert await store.read_artifact(copied.artifact_id) == b"shared bytes"


async def test_a_session_written_since_it_was_listed_is_left_alone(store: SessionStore) -> None:
    """The job checks, under the session's lock, that the session is still idle."""
    sid = await session(store, 1)
    long_ago = (datetime.now(UTC) - timedelta(days=30)).isoformat(timespec="microseconds")
    delete = partial(lifecycle.delete_idle, session_id=sid, idle_before=long_ago)
    assert await run_write(store, delete) is None
    archive = partial(lifecycle.archive_idle, session_id=sid, idle_before=long_ago)
    assert await run_write(store, archive) is False
    assert (await store.get_session(sid)).status == "active"


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"archive_after": 30}, "archive_after 30"),
        ({"delete_after": timedelta(0)}, "delete_after"),
        ({"delete_after": timedelta(days=-1)}, "delete_after"),
        ({"archive_after": "30d"}, "archive_after '30d'"),
        ({"owner": "a b"}, "owner 'a b'"),
    ],
)
def test_a_bad_policy_is_refused_when_made(arguments: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        RetentionPolicy(**arguments)


async def test_apply_retention_takes_a_policy_only(store: SessionStore) -> None:
    await session(store, 200)
    before = snapshot(store)
    with pytest.raises(InvalidArgument, match="policy"):
        await store.apply_retention({"delete_after": timedelta(days=1)})  # type: ignore[arg-type]
    assert snapshot(store) == before


async def test_a_span_beyond_the_calendar_keeps_everything(store: SessionStore) -> None:
    await session(store, 200)
    assert await store.apply_retention(RetentionPolicy(delete_after=timedelta.max)) == (
        RetentionReport()
    )


async def test_a_scoped_run_keeps_to_its_owner(store: SessionStore) -> None:
    mine = await session(store, 200, owner="alice")
    await session(store, 200, owner="bob")
    await session(store, 200)
    scoped = store.scoped("alice")
    report = await scoped.apply_retention(RetentionPolicy(delete_after=timedelta(days=1)))
    assert report == RetentionReport(deleted=[mine])
    with pytest.raises(InvalidArgument, match="owner 'bob'"):
        await scoped.apply_retention(RetentionPolicy(delete_after=timedelta(days=1), owner="bob"))
    assert len(await store.list_sessions()) == 2
