"""Concurrent writers: coroutines of one store, and several OS processes on one database."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from soong_store import SessionStore
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import events_table, execute, nodes_table

pytestmark = pytest.mark.asyncio


def assert_dense(values: list[int]) -> None:
    assert sorted(values) == list(range(1, len(values) + 1))


async def test_eight_child_agents_append_concurrently(store: SessionStore):
    s = await store.create_session(cwd=".")
    sid = s.session_id
    main_run = await store.start_run(sid, s.root_agent_id)
    agents = [
        await store.create_agent(sid, "sub", created_by_run_id=main_run.run_id) for _ in range(8)
    ]

    async def work(agent_id: str) -> list[str]:
        run = await store.start_run(sid, agent_id)
        ids = []
        for i in range(25):
            role = "user" if i % 2 == 0 else "assistant"
            if i % 5 == 4:
                async with store.transaction(sid) as tx:
                    ids.append(tx.add_node(role, "message", text(str(i)), run_id=run.run_id))
                    tx.add_event("tick", run_id=run.run_id)
            else:
                node = await store.append_node(
                    sid, role, "message", text(str(i)), run_id=run.run_id
                )
                ids.append(node.node_id)
        await store.finish_run(run.run_id, "completed", "completed")
        return ids

    chains = await asyncio.gather(
        *(work(a.agent_id) for a in agents),
        *(
            store.append_node(
                sid,
                "user" if i % 2 == 0 else "assistant",
                "message",
                text("m"),
                run_id=main_run.run_id,
            )
            for i in range(10)
        ),
    )
    for chain in chains[:8]:
        path = await store.active_path(sid, chain[-1])
        assert [n.node_id for n in path] == chain
    events = await store.timeline(sid)
    assert_dense([e.seq for e in events])
    nodes = await store.list_nodes(sid)
    assert len(nodes) == 8 * 25 + 10
    assert_dense([n.node_seq for n in nodes])
    for run in await store.list_runs(sid):
        assert_dense([e.run_seq or 0 for e in await store.timeline(sid, run_id=run.run_id)])


WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from soong_store import SessionStore

    async def main(home, url, shared, n):
        async with SessionStore(home=home, url=url) as store:
            own = (await store.create_session(cwd=".")).session_id
            for i in range(n):
                for sid in (shared, own):
                    async with store.transaction(sid) as tx:
                        tx.add_node("user", "message", [{"type": "text", "text": str(i)}],
                                    parent_id=None)
                        tx.add_event("proc_tick", payload={"i": i})
        print(own)

    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
    """
)


@pytest.mark.slow
async def test_several_processes_share_one_database(backend: Backend):
    async with backend.store() as store:
        shared = (await store.create_session(cwd=".")).session_id
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(backend.home), backend.url, shared, "40"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert "locked" not in err
    seqs = [r[0] for r in execute(backend, f'SELECT node_seq FROM "{nodes_table(shared)}"')]
    assert len(seqs) == 160
    assert_dense(seqs)
    events = [r[0] for r in execute(backend, f'SELECT seq FROM "{events_table(shared)}"')]
    assert_dense(events)
    assert len(events) == 1 + 160 * 2
    for out, _ in outputs:
        own = out.strip()
        assert execute(backend, f'SELECT count(*) FROM "{nodes_table(own)}"') == [(40,)]
