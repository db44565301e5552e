"""``check``: clean on the demo, and every kind of damage found and named by its ids."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from soong_store.check.run import check_store
from soong_store.demo import write_demo
from tests.backends import Backend
from tests.helpers import events_table, execute, nodes_table, side_door


@pytest.fixture(scope="module")
def demo(module_backend: Backend) -> tuple[Backend, str]:
    async def build() -> str:
        async with module_backend.store() as store:
            return await write_demo(store, module_backend.home / "demo-project")

    return module_backend, asyncio.run(build())


@pytest.fixture
def damaged(demo: tuple[Backend, str], clone: Callable[[Backend, str], Backend]) -> dict[str, Any]:
    """A copy of the demo (working in its own project folder) and its ids, by node_seq."""
    backend = clone(demo[0], "home")
    home = backend.home
    sid = demo[1]
    execute(backend, "UPDATE sessions SET cwd = :cwd", {"cwd": str(home / "demo-project")})
    nodes = dict(execute(backend, f'SELECT node_seq, node_id FROM "{nodes_table(sid)}"'))
    runs = [r for (r,) in execute(backend, "SELECT run_id FROM runs ORDER BY created_at, run_id")]
    agents = dict(execute(backend, "SELECT agent_type, agent_id FROM agents"))
    arts = dict(execute(backend, "SELECT mime_type, artifact_id FROM artifacts"))
    return {"backend": backend, "home": home, "sid": sid, "nodes": nodes, "runs": runs,
            "agents": agents, "artifacts": arts}  # fmt: skip


def problems(backend: Backend, session_id: str | None = None) -> list[tuple[str, tuple[str, ...]]]:
    async def run() -> list[tuple[str, tuple[str, ...]]]:
        async with backend.store() as store:
            report = await check_store(store, session_id)
        return [(p.kind, p.ids) for p in report.problems]

    return asyncio.run(run())


def age(path: Path) -> None:
    old = time.time() - 3600
    os.utime(path, (old, old))


async def test_clean_on_the_demo(demo: tuple[Backend, str]) -> None:
    async with demo[0].store() as store:
        report = await check_store(store)
        assert report.ok and report.sessions == [demo[1]]
        assert (await check_store(store, demo[1])).ok


def test_every_kind_of_damage_is_found_by_its_ids(damaged: dict[str, Any]) -> None:
    backend, home, sid = damaged["backend"], damaged["home"], damaged["sid"]
    n, runs, agents, arts = (
        damaged["nodes"],
        damaged["runs"],
        damaged["agents"],
        damaged["artifacts"],
    )
    nodes, events = f'"{nodes_table(sid)}"', f'"{events_table(sid)}"'
    ghost = nodes_table("sess_ghost")
    warning = execute(
        backend, f"SELECT event_id, run_id FROM {events} WHERE event_type = 'context_near_limit'"
    )[0]
    switched = execute(
        backend, f"SELECT event_id FROM {events} WHERE event_type = 'node_switched'"
    )[0][0]
    nodes_run = dict(execute(backend, f"SELECT node_seq, run_id FROM {nodes}"))
    now = "2026-01-01T00:00:00.000000+00:00"
    with side_door(backend) as con:

        def damage(sql: str, **params: Any) -> None:
            con.execute(text(sql), params)

        damage(f"UPDATE {events} SET node_id = NULL WHERE node_id = :id", id=n[2])
        damage(f"UPDATE {nodes} SET parent_id = 'node_nowhere' WHERE node_seq = 3")
        damage(f"UPDATE {nodes} SET parent_id = :id WHERE node_seq = 16", id=n[17])
        damage(f"UPDATE {nodes} SET node_seq = 100 WHERE node_seq = 27")
        damage(f"DELETE FROM {events} WHERE event_id = :id", id=warning[0])
        damage(f"UPDATE {events} SET node_id = 'node_ghost' WHERE event_id = :id", id=switched)
        damage("UPDATE sessions SET active_node_id = 'node_gone'")
        damage("UPDATE runs SET end_node_id = 'node_gone2' WHERE run_id = :id", id=runs[0])
        damage("UPDATE agents SET fork_from_node_id = 'node_gone3' WHERE agent_type = 'fork'")
        damage(f"UPDATE {nodes} SET agent_id = 'agent_ghost' WHERE node_seq = 5")
        damage(f"UPDATE {nodes} SET run_id = 'run_ghost' WHERE node_seq = 4")
        damage(f'UPDATE {nodes} SET content_json = \'[{{"type":"nope"}}]\' WHERE node_seq = 2')
        damage("DELETE FROM artifacts WHERE artifact_id = :id", id=arts["text/plain"])
        damage("UPDATE artifacts SET size_bytes = 5 WHERE mime_type = 'application/json'")
        damage(f'CREATE TABLE "{ghost}" (x TEXT)')
        for bad in ("bad-id", "sess_no_tables"):
            damage(
                "INSERT INTO sessions VALUES (:id, '.', 'agent_none', NULL, NULL, 'active', NULL,"
                " :now, :now, NULL, NULL)",
                id=bad,
                now=now,
            )
        # the catalog names a pair that is not there
        damage("INSERT INTO session_files VALUES ('sess_no_tables', 'main', 0)")
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
        ("orphan_table", (ghost,)),
        ("invalid_session_id", ("bad-id",)),
        ("missing_table", (nodes_table("sess_no_tables"),)),
        ("missing_table", (events_table("sess_no_tables"),)),
        ("missing_root_agent", ("sess_no_tables", "agent_none")),
        # what the damage above breaks besides, found by the same rules an import applies
        ("invalid_row", ("sess_no_tables",)),  # its cwd "." is not an absolute path
        ("search_index", (n[2],)),  # its indexed text is not what its content now says
        ("node_order", (n[16], n[17])),  # #16's parent is now #17, numbered after it
        ("run_rule", (n[5], nodes_run[5])),  # #5 (now agent_ghost's) is in a run of another
        ("run_rule", (runs[0],)),  # its end node is not its last node any more
    }
    found = set(problems(backend))
    assert expected - found == set()
    assert {kind for kind, _ in found} == {kind for kind, _ in expected}

    done = subprocess.run(
        [sys.executable, "-m", "soong_store", *backend.cli, "check", "--json"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and done.stderr == ""
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["sessions_checked"] == 3
    assert {(p["kind"], tuple(p["ids"])) for p in report["problems"]} == found

    only = set(problems(backend, sid))
    assert only and all(kind not in ("orphan_table", "missing_table") for kind, _ in only)
    assert ("orphan_artifact_file", ("sess_ghost/art_x.bin",)) not in only


def test_a_missing_artifact_file_and_a_young_orphan(damaged: dict[str, Any]) -> None:
    home, sid = damaged["home"], damaged["sid"]
    spilled = next((home / "artifacts" / sid).glob("*.json"))
    spilled.unlink()
    (home / "artifacts" / sid / "art_in_flight.bin").write_bytes(b"a unit about to commit")
    assert problems(damaged["backend"]) == [
        ("missing_artifact_file", (damaged["artifacts"]["application/json"],))
    ]


def test_an_active_node_of_another_agent(damaged: dict[str, Any]) -> None:
    backend, sid, n = damaged["backend"], damaged["sid"], damaged["nodes"]
    execute(backend, "UPDATE sessions SET active_node_id = :id", {"id": n[16]})  # the sub's
    assert problems(backend) == [("active_node_agent", (sid, n[16]))]


def test_a_usage_ledger_that_differs_from_the_runs_usage(damaged: dict[str, Any]) -> None:
    backend, sid, runs = damaged["backend"], damaged["sid"], damaged["runs"]
    counted = execute(backend, "SELECT run_id FROM run_usage ORDER BY run_id")
    assert len(counted) >= 2  # the demo's runs record usage
    first, second = counted[0][0], counted[1][0]
    execute(backend, "UPDATE run_usage SET input_tokens = 1 WHERE run_id = :r", {"r": first})
    execute(backend, "DELETE FROM run_usage WHERE run_id = :r", {"r": second})
    assert set(problems(backend)) == {("usage_ledger", (first,)), ("usage_ledger", (second,))}
    assert set(problems(backend, sid)) == {("usage_ledger", (first,)), ("usage_ledger", (second,))}
    assert set(runs) >= {first, second}
