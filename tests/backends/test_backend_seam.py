"""The backend seam on a real SQLite file: the store's one lock deadline, the per-session lock hook,
whether a database exists, and the snapshot tests compare."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection

from soong_store import SessionStore
from soong_store.backends.base import open_backend
from soong_store.backends.sqlite.backend import SQLiteBackend
from soong_store.errors import InvalidArgument, StorageError
from soong_store.search.index import is_search_table
from soong_store.transfer import export_session, import_session
from tests.conftest import connect_raw, db_path, snapshot, text


async def test_a_write_held_off_past_the_store_s_lock_wait_fails_cleanly(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("soong_store.backends.sqlite.backend.BUSY_TIMEOUT_MS", 50)
    async with SessionStore(home=home, lock_wait=0.5) as store:
        sid = (await store.create_session(cwd=".")).session_id
        holder = connect_raw(db_path(home), isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(StorageError, match="stayed locked for 0.5 s"):
                await store.append_node(sid, "user", "message", text("held off"))
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await store.append_node(sid, "user", "message", text("after the lock"))
        assert [n.content[0].text for n in await store.active_path(sid)] == ["after the lock"]


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), True, "5", None])
def test_a_lock_wait_that_is_not_positive_seconds_is_refused(home: Path, bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="invalid lock_wait") as caught:
        SessionStore(home=home, lock_wait=bad)
    assert repr(bad) in str(caught.value)
    assert not home.exists()


async def test_every_job_that_writes_or_makes_a_session_takes_its_lock(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked: list[str] = []

    def record(cls: type[SQLiteBackend], connection: Connection, session_id: str) -> None:
        locked.append(session_id)

    monkeypatch.setattr(SQLiteBackend, "lock_session", classmethod(record))
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        assert sid in locked
        locked.clear()
        node = await store.append_node(sid, "user", "message", text("q"))
        assert locked and set(locked) == {sid}
        locked.clear()
        fork = await store.fork_session(sid, node.node_id)
        assert fork.session_id in locked
        out = io.StringIO()
        await export_session(store, sid, out)
        locked.clear()
        copy = await import_session(store, out.getvalue().splitlines(), new_id=True)
        assert locked[0] == copy.session_id  # before the import looks whether the id is free


def test_a_sqlite_database_exists_once_its_file_does(tmp_path: Path) -> None:
    file = tmp_path / "some db.sqlite"
    plain = open_backend(f"sqlite:///{file}")
    uri = open_backend(f"sqlite:///file:{str(file).replace(' ', '%20')}?mode=rwc&uri=true")
    assert not plain.database_exists() and not uri.database_exists()
    assert plain.location == uri.location == str(file)
    file.write_bytes(b"")
    assert plain.database_exists() and uri.database_exists()


async def test_the_snapshot_sees_every_change_and_only_changes(home: Path) -> None:
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=".")).session_id
        await store.append_event(sid, "first write: the pair exists")
        before = snapshot(home)
        assert snapshot(home) == before
        await store.append_node(sid, "user", "message", text("a change"))
        after = snapshot(home)
    assert after != before
    changed = [k for k in after if after[k] != before[k]]
    assert [k for k in changed if not is_search_table(k)] == [
        f"events_{sid}",
        f"nodes_{sid}",
        "sessions",
    ]
    assert "search_text" in changed  # the node's text, indexed in its transaction
