"""``check``: clean on the demo, and every kind of damage found and named by its ids."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.check import check_store
from soong_store.demo import write_demo
from tests.conftest import connect_raw, db_path


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    home = tmp_path_factory.mktemp("check") / "home"

    async def build() -> str:
        async with SessionStore(home=home) as store:
            return await write_demo(store, home / "demo-project")

    return home, asyncio.run(build())


@pytest.fixture
def damaged(demo: tuple[Path, str], tmp_path: Path) -> dict[str, Any]:
    """A copy of the demo home (working in its own project folder) and its ids, by node_seq."""
    home = tmp_path / "home"
    shutil.copytree(demo[0], home)
    sid = demo[1]
    con = connect_raw(db_path(home))
    con.execute("UPDATE sessions SET cwd = ?", (str(home / "demo-project"),))
    con.commit()
    nodes = dict(con.execute(f'SELECT node_seq, node_id FROM "nodes_{sid}"').fetchall())
    runs = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY created_at, run_id")]
    agents = dict(con.execute("SELECT agent_type, agent_id FROM agents").fetchall())
    arts = dict(con.execute("SELECT mime_type, artifact_id FROM artifacts").fetchall())
    return {"home": home, "sid": sid, "con": con, "nodes": nodes, "runs": runs,
            "agents": agents, "artifacts": arts}  # fmt: skip


def problems(home: Path, session_id: str | None = None) -> list[tuple[str, tuple[str, ...]]]:
    async def run() -> list[tuple[str, tuple[str, ...]]]:
        async with SessionStore(home=home) as store:
            report = await check_store(store, session_id)
        return [(p.kind, p.ids) for p in report.problems]

    return asyncio.run(run())


def age(path: Path) -> None:
    old = time.time() - 3600
    os.utime(path, (old, old))


async def test_clean_on_the_demo(demo: tuple[Path, str]) -> None:
    async with SessionStore(home=demo[0]) as store:
        report = await check_store(store)
        assert report.ok and report.sessions == [demo[1]]
        assert (await check_store(store, demo[1])).ok


def test_every_kind_of_damage_is_found_by_its_ids(damaged: dict[str, Any]) -> None:
    home, sid, con = damaged["home"], damaged["sid"], damaged["con"]
    n, runs, agents, arts = (
        damaged["nodes"],
        damaged["runs"],
        damaged["agents"],
        damaged["artifacts"],
    )
    nodes, events = f'"nodes_{sid}"', f'"events_{sid}"'
    warning = con.execute(
        f"SELECT event_id, run_id FROM {events} WHERE event_type = 'context_near_limit'"
    ).fetchone()
    switched = con.execute(
        f"SELECT event_id FROM {events} WHERE event_type = 'node_switched'"
    ).fetchone()[0]
    nodes_run = dict(con.execute(f"SELECT node_seq, run_id FROM {nodes}").fetchall())
    now = "2026-01-01T00:00:00.000000+00:00"
    with con:
        con.execute(f"UPDATE {events} SET node_id = NULL WHERE node_id = ?", (n[2],))
        con.execute(f"UPDATE {nodes} SET parent_id = 'node_nowhere' WHERE node_seq = 3")
        con.execute(f"UPDATE {nodes} SET parent_id = ? WHERE node_seq = 16", (n[17],))
        con.execute(f"UPDATE {nodes} SET node_seq = 100 WHERE node_seq = 27")
        con.execute(f"DELETE FROM {events} WHERE event_id = ?", (warning[0],))
        con.execute(f"UPDATE {events} SET node_id = 'node_ghost' WHERE event_id = ?", (switched,))
        con.execute("UPDATE sessions SET active_node_id = 'node_gone'")
        con.execute("UPDATE runs SET end_node_id = 'node_gone2' WHERE run_id = ?", (runs[0],))
        con.execute("UPDATE agents SET fork_from_node_id = 'node_gone3' WHERE agent_type = 'fork'")
        con.execute(f"UPDATE {nodes} SET agent_id = 'agent_ghost' WHERE node_seq = 5")
        con.execute(f"UPDATE {nodes} SET run_id = 'run_ghost' WHERE node_seq = 4")
        con.execute(f'UPDATE {nodes} SET content_json = \'[{{"type":"nope"}}]\' WHERE node_seq = 2')
        con.execute("DELETE FROM artifacts WHERE artifact_id = ?", (arts["text/plain"],))
        con.execute("UPDATE artifacts SET size_bytes = 5 WHERE mime_type = 'application/json'")
        con.execute("CREATE TABLE nodes_sess_ghost (x)")
        for bad in ("bad-id", "sess_no_tables"):
            row = (bad, ".", "agent_none", None, None, "active", None, now, now)
            con.execute("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
    con.close()
    artifacts = home / "artifacts"
    attachment = next((artifacts / sid).glob("*.txt"))
    age(attachment)
    stranger = artifacts / "sess_ghost" / "art_x.bin"
    stranger.parent.mkdir()
    stranger.write_bytes(b"?")
    age(stranger)
    wal = next((home / "demo-project" / ".soong-agent" / "tasks" / sid).glob("*.wal.jsonl"))
    wal.write_bytes(wal.read_bytes().replace(b"Fix days_in_month", b"Fix DAYS_in_month"))

    expected = {
        ("node_without_event", (n[2],)),
        ("missing_parent", (n[3], "node_nowhere")),
        ("parent_cycle", (n[16], n[17])),
        ("node_seq", ()),
        ("seq", ()),
        ("run_seq", (warning[1],)),
        ("event_missing_node", (switched, "node_ghost")),
        ("missing_active_node", (sid, "node_gone")),
        ("missing_run_node", (runs[0], "node_gone2")),
        ("missing_fork_node", (agents["fork"], "node_gone3")),
        ("unknown_agent", (n[5], "agent_ghost")),
        ("unknown_run", (n[4], "run_ghost")),
        ("invalid_content", (n[2],)),
        ("dangling_artifact_ref", (n[7], arts["text/plain"])),
        ("orphan_artifact_file", (f"{sid}/{attachment.name}",)),
        ("orphan_artifact_file", ("sess_ghost/art_x.bin",)),
        ("artifact_size", (arts["application/json"],)),
        ("task_wal", (wal.name,)),
        ("orphan_table", ("nodes_sess_ghost",)),
        ("invalid_session_id", ("bad-id",)),
        ("missing_table", ("nodes_sess_no_tables",)),
        ("missing_table", ("events_sess_no_tables",)),
        ("missing_root_agent", ("sess_no_tables", "agent_none")),
        # what the damage above breaks besides, found by the same rules an import applies
        ("invalid_row", ("sess_no_tables",)),  # its cwd "." is not an absolute path
        ("node_order", (n[16], n[17])),  # #16's parent is now #17, numbered after it
        ("run_rule", (n[5], nodes_run[5])),  # #5 (now agent_ghost's) is in a run of another
        ("run_rule", (runs[0],)),  # its end node is not its last node any more
    }
    found = set(problems(home))
    assert expected - found == set()
    assert {kind for kind, _ in found} == {kind for kind, _ in expected}

    done = subprocess.run(
        [sys.executable, "-m", "soong_store", "--home", str(home), "check", "--json"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and done.stderr == ""
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["sessions_checked"] == 3
    assert {(p["kind"], tuple(p["ids"])) for p in report["problems"]} == found

    only = set(problems(home, sid))
    assert only and all(kind not in ("orphan_table", "missing_table") for kind, _ in only)
    assert ("orphan_artifact_file", ("sess_ghost/art_x.bin",)) not in only


def test_a_missing_artifact_file_and_a_young_orphan(damaged: dict[str, Any]) -> None:
    home, sid = damaged["home"], damaged["sid"]
    damaged["con"].close()
    spilled = next((home / "artifacts" / sid).glob("*.json"))
    spilled.unlink()
    (home / "artifacts" / sid / "art_in_flight.bin").write_bytes(b"a unit about to commit")
    assert problems(home) == [
        ("missing_artifact_file", (damaged["artifacts"]["application/json"],))
    ]


def overwrite_root_page(home: Path, name: str) -> int:
    """Fill the root page of table or index ``name`` with 0xff; return its page number."""
    con = connect_raw(db_path(home))
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    con.close()
    with db_path(home).open("r+b") as db:
        db.seek((root - 1) * page_size)
        db.write(b"\xff" * page_size)
    return int(root)


def check_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "soong_store", "--home", str(home), "check", *args]
    return subprocess.run(command, capture_output=True, text=True)


def test_quick_check_finds_a_damaged_page(damaged: dict[str, Any]) -> None:
    home, sid = damaged["home"], damaged["sid"]
    damaged["con"].close()
    root = overwrite_root_page(home, f"nodes_{sid}_parent_id_ix")
    done = check_cli(home)
    assert done.returncode == 1 and done.stderr == ""
    # SQLite words its report differently across versions ("Page 24:" / "Tree 24 page 24:",
    # and from 3.46 an extra index-entry count).
    assert done.stdout.startswith("quick_check: ") and f"page {root}:" in done.stdout.lower()
    assert re.search(r"checked 1 session\(s\): [1-9][0-9]* problems?$", done.stdout.rstrip())


def test_a_session_with_a_damaged_table_is_reported_and_the_others_checked(
    damaged: dict[str, Any],
) -> None:
    home, sid = damaged["home"], damaged["sid"]
    damaged["con"].close()

    async def add_session() -> str:
        async with SessionStore(home=home) as store:
            other = (await store.create_session(cwd=str(home))).session_id
            await store.append_node(other, "user", "message", [{"type": "text", "text": "hi"}])
            return other

    other = asyncio.run(add_session())
    overwrite_root_page(home, f"nodes_{sid}")
    done = check_cli(home, "--json")
    assert done.returncode == 1 and done.stderr == ""
    report = json.loads(done.stdout)
    assert report["sessions_checked"] == 2
    unreadable = [p for p in report["problems"] if p["kind"] == "unreadable_session"]
    assert [p["session_id"] for p in unreadable] == [sid]
    assert "damaged" in unreadable[0]["message"]
    assert not [p for p in report["problems"] if p["session_id"] == other]
