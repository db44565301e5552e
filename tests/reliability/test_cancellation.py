"""Cancellation: callers cancelled at random points never leave half a unit or a wedged writer.

Batches of concurrent calls — units of work with an attachment, a spilled JSON block, three nodes
and an event; single ``append_node`` calls; task DAG appends — are cancelled at random moments
(``task.cancel()`` after a random delay, or ``asyncio.wait_for`` with a tiny timeout), so that
cancellation lands before the queue, while artifact files are written, while the job waits in
the queue, while it runs and after it committed. Afterwards: every acknowledged call is stored,
every unit is whole or absent, the writer answers at once, seqs are dense, the in-memory task DAG
equals its replayed WAL, and the only leftovers are orphan files that ``gc`` removes.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.store import runtime_of
from soong_store.tasks.wal import TaskDag
from tests.conftest import text
from tests.reliability.conftest import artifact_files, assert_dense, integrity, raw

pytestmark = pytest.mark.reliability

SEED = 1234
BATCHES = 50
PER_BATCH = 8
TIMEOUTS = [0, 1e-4, 5e-4, 1e-3, 3e-3, 1e-2, 3e-2]


async def settle_files(home: Path, timeout: float = 30) -> None:
    """Wait until cancelled callers' file writes (threads still running) have finished."""
    deadline = time.monotonic() + timeout
    previous: Any = None
    while time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        current = {name: path.stat().st_size for name, path in artifact_files(home).items()}
        if current == previous:
            return
        previous = current
    pytest.fail("artifact files kept changing")


async def test_cancelled_callers_never_leave_half_a_unit(
    home: Path, tmp_path: Path, figures: dict[str, Any]
):
    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    acked: dict[str, str] = {}  # tag -> kind
    tried: dict[str, str] = {}
    async with SessionStore(home=home) as store:
        session = await store.create_session(cwd=str(tmp_path / "project"))
        sid = session.session_id
        run = (await store.start_run(sid, session.root_agent_id)).run_id
        dag = await store.task_dag(sid, "plan")

        async def unit(tag: str) -> None:
            big = rng.random() < 0.4
            async with store.transaction(sid) as tx:
                aid = tx.add_artifact(rng.randbytes(3000), metadata={"unit": tag})
                tx.add_node("user", "message", text(tag), run_id=run, metadata={"unit": tag})
                tx.add_node(
                    "assistant",
                    "message",
                    [{"type": "artifact_ref", "artifact_id": aid}],
                    run_id=run,
                    metadata={"unit": tag},
                )
                rows = [{"i": i, "pad": "p" * 50} for i in range(500 if big else 2)]
                tx.add_node(
                    "tool",
                    "message",
                    [{"type": "json", "data": rows}],
                    run_id=run,
                    metadata={"unit": tag},
                )
                tx.add_event("unit_mark", run_id=run, payload={"unit": tag})

        async def single(tag: str) -> None:
            await store.append_node(sid, "user", "message", text(tag), metadata={"unit": tag})

        async def task(tag: str) -> None:
            await dag.add(tag, f"task {tag}")

        kinds = {"unit": unit, "single": single, "task": task}
        for b in range(BATCHES):
            calls = []
            for i in range(PER_BATCH):
                tag = f"b{b}c{i}"
                kind = rng.choice(["unit", "unit", "single", "task"])
                tried[tag] = kind
                how = rng.random()
                if how < 0.4:
                    job = asyncio.ensure_future(
                        asyncio.wait_for(kinds[kind](tag), rng.choice(TIMEOUTS))
                    )
                else:
                    job = asyncio.ensure_future(kinds[kind](tag))
                    if how < 0.9:
                        asyncio.get_running_loop().call_later(rng.uniform(0, 0.03), job.cancel)
                calls.append((tag, job))
            results = await asyncio.wait_for(
                asyncio.gather(*(job for _, job in calls), return_exceptions=True), 60
            )
            for (tag, _), result in zip(calls, results, strict=True):
                if isinstance(result, asyncio.CancelledError | TimeoutError):
                    outcomes["cancelled"] += 1
                elif isinstance(result, BaseException):
                    raise result
                else:
                    outcomes["acknowledged"] += 1
                    acked[tag] = tried[tag]

        start = time.monotonic()
        await asyncio.wait_for(store.append_node(sid, "user", "message", text("final")), 5)
        final_write_s = time.monotonic() - start
        assert runtime_of(store).writer_alive
        await settle_files(home)
        in_memory = {t.task_id: t for t in dag.tasks()}

        with raw(home) as con:
            nodes = con.execute(
                f"SELECT node_id, node_seq, metadata_json FROM nodes_{sid} ORDER BY node_seq"
            ).fetchall()
            events = con.execute(
                f"SELECT seq, run_seq, run_id, event_type, node_id, payload_json FROM events_{sid}"
            ).fetchall()
            artifacts = con.execute(
                "SELECT path, node_id, metadata_json FROM artifacts WHERE session_id = ?", (sid,)
            ).fetchall()
        assert_dense([n[1] for n in nodes], "node_seq")
        assert_dense([e[0] for e in events], "seq")
        assert_dense([e[1] for e in events if e[2] == run], "run_seq")
        named = {e[4] for e in events}
        assert all(n[0] in named for n in nodes), "a node without its event"

        per_tag: dict[str, Counter[str]] = {}
        node_tag = {}
        for node_id, _seq, meta in nodes:
            tag = json.loads(meta)["unit"] if meta else "final"
            node_tag[node_id] = tag
            per_tag.setdefault(tag, Counter())["nodes"] += 1
        for _seq, _rs, _run, event_type, _node, payload in events:
            if event_type == "unit_mark":
                per_tag.setdefault(json.loads(payload)["unit"], Counter())["marks"] += 1
        for _path, node_id, meta in artifacts:
            tag = json.loads(meta)["unit"] if meta else node_tag[node_id]
            per_tag.setdefault(tag, Counter())["artifacts"] += 1
        for tag, kind in tried.items():
            got = per_tag.get(tag, Counter())
            if kind == "unit":
                assert got["nodes"] in (0, 3), f"unit {tag} is partial: {got}"
                assert got["marks"] == (got["nodes"] == 3), f"unit {tag} is partial: {got}"
                assert got["artifacts"] in ((1, 2) if got["nodes"] else (0,)), got
            elif kind == "single":
                assert got["nodes"] in (0, 1) and not got["artifacts"]
            if tag in acked and kind != "task":
                assert got["nodes"], f"acknowledged {kind} {tag} is missing"
            if kind == "task":
                assert (tag in in_memory) >= (tag in acked), f"acknowledged task {tag} lost"
        cancelled_but_stored = sum(
            1
            for tag, kind in tried.items()
            if tag not in acked and (per_tag.get(tag, Counter())["nodes"] or tag in in_memory)
        )

        replayed = TaskDag.replay(dag.path, "plan")
        assert replayed.tasks == in_memory, "the in-memory DAG and its WAL disagree"
        mirrored = {
            json.loads(e[5])["task_id"] for e in events if e[3] == "task_add"
        }  # a cancelled append may skip its event, never the other way round
        assert mirrored <= set(in_memory)

        orphans = await store.gc(min_age=0)
        files = artifact_files(home)
        assert set(files) == {a[0] for a in artifacts}, "a row without its file, or a stray file"
        report = await check_store(store)
        assert report.ok, [p.message for p in report.problems]
    assert integrity(home) == ["ok"]
    figures.update(
        calls=len(tried),
        acknowledged=outcomes["acknowledged"],
        cancelled=outcomes["cancelled"],
        cancelled_but_stored_whole=cancelled_but_stored,
        units_lost=0,
        partial_units=0,
        orphan_files_collected=len(orphans),
        final_write_s=round(final_write_s, 3),
    )
