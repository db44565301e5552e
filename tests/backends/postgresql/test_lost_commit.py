"""A connection lost at COMMIT: the writer asks the server what became of the transaction.

The answer to ``COMMIT`` is cut off here by closing the driver's connection at that moment (after
the server committed, or before it could): a unit is then reported done exactly when it
committed, run again exactly when it did not, and never stored twice.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from soong_store import SessionStore
from soong_store.backends.postgresql.backend import PostgreSQLBackend
from soong_store.store import runtime_of
from tests.conftest import text

pytestmark = [pytest.mark.asyncio, pytest.mark.postgresql]


def cut_at_commit(store: SessionStore, *, after_commit: bool) -> list[int]:
    """Make the writer's next COMMIT lose its answer; returns a list counting cut commits."""
    engine = runtime_of(store).write_engine
    assert engine is not None
    dialect: Any = engine.dialect
    original: Callable[[Any], None] = dialect.do_commit
    cuts: list[int] = []

    def do_commit(pooled: Any) -> None:
        if cuts:
            original(pooled)
            return
        cuts.append(1)
        if after_commit:
            original(pooled)
        pooled.dbapi_connection.close()  # the server rolls back whatever was not committed
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    dialect.do_commit = do_commit
    return cuts


@pytest.mark.parametrize("after_commit", [True, False], ids=["committed", "not-committed"])
async def test_a_unit_whose_commit_answer_was_lost_is_stored_once(
    pg_database_url: str, tmp_path: Path, after_commit: bool
) -> None:
    async with SessionStore(home=tmp_path / "home", url=pg_database_url) as store:
        sid = (await store.create_session(cwd=".")).session_id
        cuts = cut_at_commit(store, after_commit=after_commit)
        node = await store.append_node(sid, "user", "message", text("once"))
        assert cuts == [1]
        nodes = await store.list_nodes(sid)
        assert [(n.node_id, n.node_seq) for n in nodes] == [(node.node_id, 1)]
        assert [e.event_type for e in await store.timeline(sid)] == [
            "session_created",
            "node_created",
        ]
        later = await store.append_node(sid, "assistant", "message", text("next"))
        assert later.node_seq == 2


async def test_a_lost_commit_whose_transaction_the_server_never_logged_runs_again(
    pg_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a crash the server may not know the id at all ("in the future"): not committed."""
    real = PostgreSQLBackend.commit_token.__func__  # type: ignore[attr-defined]
    asked: list[str] = []

    def unlogged(cls: type[PostgreSQLBackend], connection: Any) -> str | None:
        token: str | None = real(cls, connection)
        if asked or token is None:
            return token
        asked.append(str(int(token) + 1_000_000))  # an id the server has not handed out yet
        return asked[0]

    async with SessionStore(home=tmp_path / "home", url=pg_database_url) as store:
        sid = (await store.create_session(cwd=".")).session_id
        monkeypatch.setattr(PostgreSQLBackend, "commit_token", classmethod(unlogged))
        cuts = cut_at_commit(store, after_commit=False)
        node = await store.append_node(sid, "user", "message", text("once"))
        assert cuts == [1] and len(asked) == 1
        nodes = await store.list_nodes(sid)
        assert [(n.node_id, n.node_seq) for n in nodes] == [(node.node_id, 1)]
        assert [e.event_type for e in await store.timeline(sid)] == [
            "session_created",
            "node_created",
        ]
