"""Pairs stored by earlier versions (rowid tables with CHECKs and foreign keys) keep working.

The old shape is written raw into the file, as an earlier version left it.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.transfer import export_session, import_session
from tests.conftest import connect_raw, db_path, text

pytestmark = pytest.mark.sqlite

OLD_PAIR = """
CREATE TABLE "nodes_{sid}" (
  node_id TEXT NOT NULL, node_seq INTEGER NOT NULL,
  parent_id TEXT REFERENCES "nodes_{sid}" (node_id) DEFERRABLE INITIALLY DEFERRED,
  agent_id TEXT NOT NULL, run_id TEXT, role TEXT NOT NULL, node_type TEXT NOT NULL,
  content_json TEXT NOT NULL, metadata_json TEXT, token_count INTEGER, created_at TEXT NOT NULL,
  PRIMARY KEY (node_id), CONSTRAINT "nodes_{sid}_node_seq_uq" UNIQUE (node_seq),
  CONSTRAINT ck_role CHECK (role IN ('user', 'assistant', 'tool', 'system')),
  CONSTRAINT ck_node_seq CHECK (node_seq >= 1));
CREATE INDEX "nodes_{sid}_parent_id_ix" ON "nodes_{sid}" (parent_id);
CREATE TABLE "events_{sid}" (
  event_id TEXT NOT NULL, seq INTEGER NOT NULL, run_seq INTEGER, agent_id TEXT, run_id TEXT,
  level TEXT NOT NULL, event_type TEXT NOT NULL,
  node_id TEXT REFERENCES "nodes_{sid}" (node_id) DEFERRABLE INITIALLY DEFERRED,
  tool_call_id TEXT, payload_json TEXT, created_at TEXT NOT NULL,
  PRIMARY KEY (event_id), CONSTRAINT "events_{sid}_seq_uq" UNIQUE (seq),
  CONSTRAINT "events_{sid}_run_seq_uq" UNIQUE (run_id, run_seq),
  CONSTRAINT ck_seq CHECK (seq >= 1));
CREATE INDEX "events_{sid}_node_id_ix" ON "events_{sid}" (node_id);
INSERT INTO session_files VALUES ('{sid}', 'main', 0);
"""


async def test_an_old_shaped_pair_is_written_read_checked_and_exported(home: Path) -> None:
    async with SessionStore(home=home) as store:
        sid = (await store.create_session("/tmp/p")).session_id
        con = connect_raw(db_path(home))
        con.executescript(OLD_PAIR.format(sid=sid))
        con.close()

        first = await store.append_node(sid, "user", "message", text("q"))
        second = await store.append_node(sid, "assistant", "message", text("a"))
        assert [n.node_id for n in await store.active_path(sid)] == [
            first.node_id,
            second.node_id,
        ]
        assert [e.seq for e in await store.timeline(sid)] == [1, 2]
        fork = await store.fork_session(sid, first.node_id)
        assert len(await store.active_path(fork.session_id)) == 1
        out = io.StringIO()
        await export_session(store, sid, out)
        copy = await import_session(store, out.getvalue().splitlines(), new_id=True)
        assert len(await store.active_path(copy.session_id)) == 2
        await store.delete_session(sid)
        report = await check_store(store)
    assert [p.kind for p in report.problems] == []
    con = connect_raw(db_path(home))
    names = {n for (n,) in con.execute("SELECT name FROM sqlite_master")}
    con.close()
    assert f"nodes_{sid}" not in names and f"events_{sid}" not in names
