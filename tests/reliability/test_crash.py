"""Crash: SIGKILL a writing child at random moments, then prove nothing acknowledged was lost.

A child process writes units of work in a loop (three coroutines at once, so the writer groups
them) and prints one acknowledgement line, flushed, after each ``async with store.transaction``
returns. The parent kills it with SIGKILL at a random moment, reopens the database and checks the
guarantees of DESIGN.md §5: every acknowledged unit is there whole, no unit is partial, every node
has an event naming it, ``node_seq``/``seq``/``run_seq`` are unique and dense, every artifact row
has its file, ``integrity_check`` is ok, and the store keeps working. The same for the task WAL.
"""

from __future__ import annotations

import json
import random
import textwrap
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.tasks.wal import TaskDag, TaskStatus
from tests.conftest import text
from tests.reliability.conftest import (
    Child,
    artifact_files,
    assert_dense,
    integrity,
    raw,
    sha,
)

pytestmark = pytest.mark.reliability

ROUNDS = 24
TASK_ROUNDS = 20
SEED = 1234

UNIT_WRITER = textwrap.dedent(
    """
    import asyncio, hashlib, json, random, sys
    from soong_store import ArtifactRefBlock, SessionStore

    async def main(home, sid, run_id, rnd, seed):
        rng = random.Random(seed)
        async with SessionStore(home=home) as store:
            print("READY", flush=True)

            async def worker(w):
                i = 0
                while True:
                    unit = f"r{rnd}w{w}u{i}"
                    data = rng.randbytes(rng.randint(1, 6000))
                    big = rng.random() < 0.3
                    rows = [{"unit": unit, "i": j, "pad": "p" * 40}
                            for j in range(600 if big else 3)]
                    async with store.transaction(sid) as tx:
                        aid = tx.add_artifact(data, filename=f"{unit}.bin", metadata={"unit": unit})
                        n0 = tx.add_node("user", "message", [{"type": "text", "text": unit}],
                                         run_id=run_id, metadata={"unit": unit, "k": 0})
                        n1 = tx.add_node("assistant", "message",
                                         [ArtifactRefBlock(artifact_id=aid, summary="attached"),
                                          {"type": "text", "text": "x" * rng.randint(0, 3000)}],
                                         run_id=run_id, metadata={"unit": unit, "k": 1})
                        n2 = tx.add_node("tool", "message", [{"type": "json", "data": rows}],
                                         run_id=run_id, metadata={"unit": unit, "k": 2},
                                         event={"event_type": "tool_done",
                                                "payload": {"unit": unit}})
                        tx.add_event("unit_mark", run_id=run_id, payload={"unit": unit})
                    ack = {"unit": unit, "nodes": [n0, n1, n2], "artifact": aid,
                           "sha": hashlib.sha256(data).hexdigest(),
                           "events": sorted(e.event_id for e in tx.events),
                           "spilled": sorted(a.artifact_id for a in tx.artifacts
                                             if a.artifact_id != aid)}
                    print("ACK " + json.dumps(ack), flush=True)
                    i += 1

            await asyncio.gather(*(worker(w) for w in range(3)))

    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
    """
)

UNIT_EVENTS = Counter({"node_created": 2, "tool_done": 1, "unit_mark": 1, "artifact_created": 1})


def load_units(home: Path, sid: str, run_id: str) -> dict[str, Any]:
    """Read the session raw and check every invariant that holds whatever was acknowledged."""
    with raw(home) as con:
        nodes = con.execute(
            f"SELECT node_id, node_seq, parent_id, run_id, role, content_json, metadata_json "
            f"FROM nodes_{sid} ORDER BY node_seq"
        ).fetchall()
        events = con.execute(
            f"SELECT event_id, seq, run_seq, run_id, event_type, node_id, payload_json "
            f"FROM events_{sid} ORDER BY seq"
        ).fetchall()
        artifacts = con.execute(
            "SELECT artifact_id, path, size_bytes, node_id, metadata_json FROM artifacts "
            "WHERE session_id = ?",
            (sid,),
        ).fetchall()
        active = con.execute(
            "SELECT active_node_id FROM sessions WHERE session_id = ?", (sid,)
        ).fetchone()[0]
        start_node, end_node = con.execute(
            "SELECT start_node_id, end_node_id FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()

    assert_dense([n[1] for n in nodes], "node_seq")
    assert_dense([e[1] for e in events], "seq")
    assert_dense([e[2] for e in events if e[3] == run_id], "run_seq")
    assert all(e[2] is None for e in events if e[3] is None)
    if nodes:
        assert active == nodes[-1][0], "active node is not the newest root-agent node"
        assert (start_node, end_node) == (nodes[0][0], nodes[-1][0])

    units: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"nodes": {}, "events": Counter(), "event_ids": set(), "artifacts": set()}
    )
    node_unit: dict[str, str] = {}
    node_ids = {n[0] for n in nodes}
    for node_id, _seq, parent, _run, role, content, meta in nodes:
        info = json.loads(meta)
        units[info["unit"]]["nodes"][info["k"]] = (node_id, parent, role, json.loads(content))
        node_unit[node_id] = info["unit"]
        assert parent is None or parent in node_ids
    artifact_unit: dict[str, str] = {}
    for artifact_id, _path, _size, node_id, meta in artifacts:
        owner = json.loads(meta)["unit"] if meta else node_unit[node_id]
        artifact_unit[artifact_id] = owner
        units[owner]["artifacts"].add(artifact_id)
    named = set()
    for event_id, _seq, _rs, _run, event_type, node_id, payload in events:
        body = json.loads(payload) if payload else {}
        if node_id is not None:
            named.add(node_id)
            owner = node_unit[node_id]
        elif event_type == "unit_mark":
            owner = body["unit"]
        elif event_type == "artifact_created":
            owner = artifact_unit[body["artifact_id"]]
        else:
            continue
        units[owner]["events"][event_type] += 1
        units[owner]["event_ids"].add(event_id)
    assert node_ids <= named, f"nodes without an event: {sorted(node_ids - named)}"

    for unit, got in units.items():  # no unit is partial
        assert sorted(got["nodes"]) == [0, 1, 2], f"unit {unit} is partial: {got}"
        (n0, _, r0, _), (n1, p1, r1, c1), (n2, p2, r2, c2) = (got["nodes"][k] for k in range(3))
        assert (r0, r1, r2) == ("user", "assistant", "tool")
        assert (p1, p2) == (n0, n1), f"unit {unit} is not one chain"
        assert got["events"] == UNIT_EVENTS, f"unit {unit} events: {got['events']}"
        spilled = [b["artifact_ref"] for b in c2 if b.get("artifact_ref")]
        attached = c1[0]["artifact_id"]
        assert got["artifacts"] == {attached, *spilled}, f"unit {unit} artifacts"
    return {
        "units": units,
        "artifacts": {a[0]: (a[1], a[2]) for a in artifacts},
        "nodes": len(nodes),
        "events": len(events),
    }


def check_files(home: Path, found: dict[str, Any]) -> int:
    """Every row has its file with the recorded size; return the number of orphan files."""
    files = artifact_files(home)
    for artifact_id, (path, size) in found["artifacts"].items():
        assert path in files, f"artifact {artifact_id} has a row but no file"
        assert files[path].stat().st_size == size
    named = {path for path, _ in found["artifacts"].values()}
    return len(set(files) - named)


def check_acknowledged(home: Path, found: dict[str, Any], acked: dict[str, dict[str, Any]]) -> None:
    units = found["units"]
    lost = sorted(set(acked) - set(units))
    assert not lost, f"acknowledged units lost: {lost}"
    root = home / "artifacts"
    for unit, ack in acked.items():
        got = units[unit]
        assert [got["nodes"][k][0] for k in range(3)] == ack["nodes"]
        assert got["event_ids"] == set(ack["events"])
        assert got["artifacts"] == {ack["artifact"], *ack["spilled"]}
        path = found["artifacts"][ack["artifact"]][0]
        assert sha((root / path).read_bytes()) == ack["sha"]


async def test_sigkill_during_units_of_work_loses_nothing_acknowledged(
    home: Path, tmp_path: Path, figures: dict[str, Any], spawn: Callable[..., Child]
):
    rng = random.Random(SEED)
    async with SessionStore(home=home) as store:
        s = await store.create_session(cwd=str(tmp_path))
        sid = s.session_id
        run_id = (await store.start_run(sid, s.root_agent_id)).run_id
    acked: dict[str, dict[str, Any]] = {}
    early_kills = rounds_with_orphans = orphans_so_far = 0
    for rnd in range(ROUNDS):
        early = rng.random() < 0.15  # maybe during start-up: import, open, recovery
        delay = rng.uniform(0.3, 1.2) if early else rng.uniform(0.02, 1.5)
        child = spawn(UNIT_WRITER, str(home), sid, run_id, str(rnd), str(SEED + rnd), cwd=tmp_path)
        if early:
            early_kills += 1
            time.sleep(delay)
        else:
            child.wait_for("READY", timeout=120)
            time.sleep(delay)
        child.kill()
        lines = child.finish(timeout=60)
        assert child.proc.returncode == -9, f"child ended by itself:\n{child.stderr()}"
        this_round = [json.loads(line[4:]) for line in lines if line.startswith("ACK ")]
        acked.update((ack["unit"], ack) for ack in this_round)
        found = load_units(home, sid, run_id)  # before any store reopens the file
        check_acknowledged(home, found, acked)
        orphans = check_files(home, found)  # files written, unit never committed: allowed
        rounds_with_orphans += orphans > orphans_so_far
        orphans_so_far = orphans
        assert integrity(home) == ["ok"]
        async with SessionStore(home=home) as store:  # recovery through the store
            path = await store.active_path(sid)
            assert len(path) == found["nodes"]
            assert len(await store.timeline(sid)) == found["events"]
            for ack in rng.sample(this_round, min(5, len(this_round))):
                assert sha(await store.read_artifact(ack["artifact"])) == ack["sha"]
                node = await store.get_node(sid, ack["nodes"][1])
                assert node.content[0].artifact_id == ack["artifact"]

    found = load_units(home, sid, run_id)
    check_acknowledged(home, found, acked)
    orphans = check_files(home, found)
    async with SessionStore(home=home) as store:
        removed = await store.gc(min_age=0)
        assert len(removed) == orphans
        assert check_files(home, found) == 0
        report = await check_store(store)
        assert report.ok, [p.message for p in report.problems]
        node = await store.append_node(sid, "user", "message", text("after the crashes"))
        assert (await store.active_path(sid))[-1].node_id == node.node_id
        assert node.node_seq == found["nodes"] + 1
    assert integrity(home) == ["ok"]
    figures.update(
        rounds=ROUNDS,
        early_kills=early_kills,
        units_acknowledged=len(acked),
        units_committed=len(found["units"]),
        committed_but_unacknowledged=len(found["units"]) - len(acked),
        units_lost=0,
        nodes=found["nodes"],
        events=found["events"],
        artifacts=len(found["artifacts"]),
        rounds_leaving_orphan_files=rounds_with_orphans,
        orphan_files_collected=len(removed),
    )


TASK_WRITER = textwrap.dedent(
    """
    import asyncio, json, sys
    from soong_store import SessionStore

    async def main(home, sid, name, rnd):
        async with SessionStore(home=home) as store:
            dag = await store.task_dag(sid, name)
            print("READY", len(dag), flush=True)
            previous = None
            i = 0
            while True:
                tid = f"r{rnd}t{i}"
                await dag.add(tid, f"task {i} of round {rnd}",
                              depends_on=[previous] if previous else [], metadata={"i": i})
                print("ACK " + json.dumps(["add", tid]), flush=True)
                if previous is not None:
                    await dag.set_status(previous, "completed")
                    print("ACK " + json.dumps(["done", previous]), flush=True)
                previous = tid
                i += 1

    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
    """
)

TORN = b'{"seq":%d,"op":"add","args":{"task_id":"torn","title":"never acknow'


async def test_sigkill_during_task_wal_appends_loses_nothing_acknowledged(
    home: Path, tmp_path: Path, figures: dict[str, Any], spawn: Callable[..., Child]
):
    rng = random.Random(SEED)
    name = "ship it: crash-test the task WAL"
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=str(tmp_path / "project"))).session_id
        path = (await store.task_dag(sid, name)).path
    added: list[str] = []
    done: set[str] = set()
    torn_tails = 0
    for rnd in range(TASK_ROUNDS):
        child = spawn(TASK_WRITER, str(home), sid, name, str(rnd), cwd=tmp_path)
        child.wait_for("READY", timeout=120)
        time.sleep(rng.uniform(0.0, 1.0))
        child.kill()
        lines = child.finish(timeout=60)
        assert child.proc.returncode == -9, f"child ended by itself:\n{child.stderr()}"
        for line in lines:
            if line.startswith("ACK "):
                op, tid = json.loads(line[4:])
                (added.append if op == "add" else done.add)(tid)
        if path.exists() and rng.random() < 0.5:  # a crash in the middle of a write(2)
            state = TaskDag.replay(path, name)
            with path.open("ab") as f:
                f.write((TORN % (state.seq + 1))[: rng.randint(1, len(TORN) - 4)])
            torn_tails += 1
            assert TaskDag.replay(path, name).torn_bytes > 0
        async with SessionStore(home=home) as store:
            dag = await store.task_dag(sid, name)  # never an error: a torn tail is truncated
            assert path.read_bytes().endswith(b"\n")
            assert TaskDag.replay(path, name).torn_bytes == 0
            tasks = {t.task_id: t for t in dag.tasks()}
            missing = [t for t in added if t not in tasks]
            assert not missing, f"acknowledged task appends lost: {missing}"
            for tid in done:
                assert tasks[tid].status is TaskStatus.COMPLETED
            assert "torn" not in tasks
    async with SessionStore(home=home) as store:
        dag = await store.task_dag(sid, name)
        await dag.add("after", "after the crashes", depends_on=[added[-1]])
        total = len(dag)
        assert [t.task_id for t in dag.tasks()][-1] == "after"
    figures.update(
        rounds=TASK_ROUNDS,
        appends_acknowledged=len(added) + len(done),
        tasks_acknowledged=len(added),
        tasks_in_wal=total - 1,
        appends_lost=0,
        torn_tails_truncated=torn_tails,
    )
