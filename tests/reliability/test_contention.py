"""Contention: several OS processes, many coroutines each, one shared session, a reader walking.

Four writer processes open the same ``sessions.sqlite``; in each, eight coroutines append to the
shared session (root-agent nodes, events of the process's own sub-agent run, and nodes of that
run) and to the process's private session at once, while a reader process walks the shared
session's active path, timeline and per-run timelines in a loop. No error of any kind may reach a
caller (``database is locked`` least of all), and afterwards every count is exact, every ``seq``
dense and every chain unbroken: the writers were serialized by the file lock, never raced.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.check.run import check_store
from tests.reliability.conftest import Child, assert_dense, integrity, raw

pytestmark = pytest.mark.reliability

PROCESSES = 4
COROUTINES = 8
UNITS = 40

WRITER = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    from soong_store import SessionStore

    async def main(home, shared, go, p, coroutines, units):
        worst = 0.0
        async with SessionStore(home=home) as store:
            own = (await store.create_session(cwd=".")).session_id
            sub = await store.create_agent(shared, "sub")
            run = (await store.start_run(shared, sub.agent_id)).run_id
            print("READY", flush=True)
            deadline = time.monotonic() + 120
            while not os.path.exists(go):
                assert time.monotonic() < deadline, "no go signal"
                await asyncio.sleep(0.005)

            async def timed(awaitable):
                nonlocal worst
                start = time.monotonic()
                result = await awaitable
                worst = max(worst, time.monotonic() - start)
                return result

            async def unit(c, i):
                tag = {"p": p, "c": c, "i": i}
                role = "user" if (i + c) % 2 == 0 else "assistant"
                async with store.transaction(shared) as tx:
                    tx.add_node(role, "message", [{"type": "text", "text": json.dumps(tag)}],
                                metadata=tag)
                    tx.add_event("proc_tick", run_id=run, payload=tag)
                await store.append_node(shared, "assistant", "message",
                                        [{"type": "text", "text": "sub"}], run_id=run,
                                        metadata=tag)
                await store.append_node(own, role, "message", [{"type": "text", "text": "own"}],
                                        metadata=tag)
                if i % 4 == 0:
                    await store.timeline(own)

            async def coroutine(c):
                for i in range(units):
                    await timed(unit(c, i))

            await asyncio.gather(*(coroutine(c) for c in range(coroutines)))
            await store.finish_run(run, "completed", "completed")
        print("DONE " + json.dumps({"own": own, "run": run, "worst_s": worst}), flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]),
                     int(sys.argv[5]), int(sys.argv[6])))
    """
)

READER = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    from soong_store import SessionStore

    async def main(home, shared, stop):
        reads = longest = 0
        deadline = time.monotonic() + 400
        async with SessionStore(home=home) as store:
            print("READY", flush=True)
            while not os.path.exists(stop):
                assert time.monotonic() < deadline, "never told to stop"
                path = await store.active_path(shared)
                assert not path or path[0].parent_id is None
                for a, b in zip(path, path[1:]):
                    assert b.parent_id == a.node_id and b.node_seq > a.node_seq
                timeline = await store.timeline(shared)
                assert [e.seq for e in timeline] == list(range(1, len(timeline) + 1))
                if path:  # no compaction here: the context of the path's tip is the path
                    context = await store.context(shared, path[-1].node_id)
                    assert [n.node_id for n in context.nodes] == [n.node_id for n in path]
                for run in await store.list_runs(shared):
                    seqs = [e.run_seq for e in await store.timeline(shared, run_id=run.run_id)]
                    assert seqs == list(range(1, len(seqs) + 1)), seqs
                reads += 1
                longest = max(longest, len(path))
        print("DONE " + json.dumps({"reads": reads, "longest_path": longest}), flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
    """
)


def done_line(child: Child, lines: list[str]) -> dict[str, Any]:
    stderr = child.stderr()
    assert child.proc.returncode == 0, f"child failed:\n{stderr}"
    assert "locked" not in stderr.lower() and "Traceback" not in stderr, stderr
    finals = [line for line in lines if line.startswith("DONE ")]
    assert len(finals) == 1, lines
    result: dict[str, Any] = json.loads(finals[0][5:])
    return result


def check_chain(nodes: list[tuple[Any, ...]], what: str) -> None:
    """Nodes (by node_seq) that must form one unbranched chain, the first one a root."""
    assert nodes, what
    assert nodes[0][2] is None, f"{what}: first node is not a root"
    for previous, node in zip(nodes, nodes[1:], strict=False):
        assert node[2] == previous[0], f"{what}: chain broken at node_seq {node[1]}"


async def test_processes_and_coroutines_contend_without_errors(
    home: Path, tmp_path: Path, figures: dict[str, Any], spawn: Callable[..., Child]
):
    async with SessionStore(home=home) as store:
        session = await store.create_session(cwd=str(tmp_path))
    shared, root_agent = session.session_id, session.root_agent_id
    go, stop = tmp_path / "go", tmp_path / "stop"
    writers = [
        spawn(
            WRITER,
            str(home),
            shared,
            str(go),
            str(p),
            str(COROUTINES),
            str(UNITS),
            cwd=tmp_path,
            name=f"writer{p}",
        )
        for p in range(PROCESSES)
    ]
    reader = spawn(READER, str(home), shared, str(stop), cwd=tmp_path, name="reader")
    for child in (*writers, reader):
        child.wait_for("READY", timeout=120)
    start = time.monotonic()
    go.touch()
    results = [done_line(w, w.finish(timeout=400)) for w in writers]
    elapsed = time.monotonic() - start
    stop.touch()
    reading = done_line(reader, reader.finish(timeout=120))

    per_process = COROUTINES * UNITS
    expected_tags = {
        (p, c, i) for p in range(PROCESSES) for c in range(COROUTINES) for i in range(UNITS)
    }
    with raw(home) as con:
        nodes = con.execute(
            f"SELECT node_id, node_seq, parent_id, agent_id, run_id, metadata_json "
            f"FROM nodes_{shared} ORDER BY node_seq"
        ).fetchall()
        events = con.execute(
            f"SELECT seq, run_seq, run_id, event_type, node_id, payload_json "
            f"FROM events_{shared} ORDER BY seq"
        ).fetchall()
        own_counts = {
            r["own"]: con.execute(f"SELECT node_seq FROM nodes_{r['own']}").fetchall()
            for r in results
        }
        runs = dict(con.execute("SELECT run_id, status FROM runs WHERE session_id = ?", (shared,)))
    assert_dense([n[1] for n in nodes], "node_seq")
    assert_dense([e[0] for e in events], "seq")
    for run_id in runs:
        assert_dense([e[1] for e in events if e[2] == run_id], f"run_seq of {run_id}")
    assert set(runs.values()) == {"completed"} and len(runs) == PROCESSES

    root_nodes = [n for n in nodes if n[3] == root_agent]
    assert len(root_nodes) == PROCESSES * per_process
    check_chain(root_nodes, "root agent")
    assert {tuple(json.loads(n[5]).values()) for n in root_nodes} == expected_tags
    for r in results:
        own_run = [n for n in nodes if n[4] == r["run"]]
        assert len(own_run) == per_process
        check_chain(own_run, f"run {r['run']}")
    assert len(nodes) == 2 * PROCESSES * per_process

    named = Counter(e[4] for e in events if e[3] == "node_created")
    assert set(named) - {None} == {n[0] for n in nodes} and max(named.values()) == 1
    ticks = [json.loads(e[5]) for e in events if e[3] == "proc_tick"]
    assert {(t["p"], t["c"], t["i"]) for t in ticks} == expected_tags
    assert len(ticks) == len(expected_tags)
    for own, seqs in own_counts.items():
        assert len(seqs) == per_process, own
        assert_dense([s[0] for s in seqs], f"node_seq of {own}")
    assert integrity(home) == ["ok"]
    async with SessionStore(home=home) as store:
        report = await check_store(store)
        assert report.ok, [p.message for p in report.problems]
        assert len(await store.active_path(shared)) == len(root_nodes)

    transactions = PROCESSES * (per_process * 3 + 4)  # + session, agent, run, finish_run
    figures.update(
        processes=PROCESSES,
        coroutines_per_process=COROUTINES,
        units_per_coroutine=UNITS,
        write_transactions=transactions,
        shared_nodes=len(nodes),
        shared_events=len(events),
        reader_passes=reading["reads"],
        longest_path_read=reading["longest_path"],
        worst_unit_latency_s=round(max(r["worst_s"] for r in results), 2),
        writers_s=round(elapsed, 1),
        errors=0,
        units_lost=0,
    )
