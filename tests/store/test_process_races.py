"""Processes racing for one rule at once: exactly one wins, the others get the documented error."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from soong_store import RunStatus
from tests.backends import Backend
from tests.conftest import text
from tests.helpers import events_table, execute, nodes_table

pytestmark = pytest.mark.asyncio

RACER = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from soong_store import ConcurrentRunError, SessionStore

    async def main(home, url, sid, agent_id, go):
        async with SessionStore(home=home, url=url) as store:
            await store.get_session(sid)  # opened and connected before the start line
            while not os.path.exists(go):
                time.sleep(0.001)
            try:
                run = await store.start_run(sid, agent_id)
            except ConcurrentRunError:
                print("refused")
            else:
                print("won", run.run_id)

    asyncio.run(main(*sys.argv[1:6]))
    """
)


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
async def test_six_processes_racing_start_run_of_one_main_agent_one_wins(
    backend: Backend,
) -> None:
    async with backend.store() as store:
        session = await store.create_session(cwd=".")
    sid, agent = session.session_id, session.root_agent_id
    go = backend.home / "go"
    procs = [_spawn(RACER, str(backend.home), backend.url, sid, agent, str(go)) for _ in range(6)]
    time.sleep(1.0)  # let them open; each waits for the file
    go.touch()
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    said = sorted(out.split()[0] for out, _ in outputs)
    assert said == ["refused"] * 5 + ["won"]
    winner = next(out.split()[1] for out, _ in outputs if out.startswith("won"))
    async with backend.store() as store:
        runs = await store.list_runs(sid)
        assert [(r.run_id, r.status) for r in runs] == [(winner, RunStatus.RUNNING)]
        starts = [e for e in await store.timeline(sid) if e.event_type == "run_started"]
        assert [e.run_id for e in starts] == [winner]


APPENDER = textwrap.dedent(
    """
    import asyncio, sys
    from soong_store import SessionStore

    async def worker(store, sids, n, lane):
        for i in range(n):
            for sid in sids:
                async with store.transaction(sid) as tx:
                    tx.add_node("user", "message", [{"type": "text", "text": f"{lane}.{i}"}],
                                parent_id=None)
                    tx.add_event("proc_tick", payload={"lane": lane, "i": i})

    async def main(home, url, n, *sids):
        async with SessionStore(home=home, url=url) as store:
            # Three coroutines at once: the writer commits their jobs together, one batch
            # touching several sessions, while other processes hold those sessions' locks.
            await asyncio.gather(*(worker(store, sids, int(n), lane) for lane in range(3)))

    asyncio.run(main(*sys.argv[1:]))
    """
)


@pytest.mark.reliability
async def test_four_processes_batching_over_shared_sessions_keep_counts_exact(
    backend: Backend,
) -> None:
    async with backend.store() as store:
        sids = [(await store.create_session(cwd=".")).session_id for _ in range(3)]
        await store.append_node(sids[0], "user", "message", text("before"))
    procs = [_spawn(APPENDER, str(backend.home), backend.url, "15", *sids) for _ in range(4)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert err == ""
    for index, sid in enumerate(sids):
        extra = 1 if index == 0 else 0
        seqs = sorted(r[0] for r in execute(backend, f'SELECT node_seq FROM "{nodes_table(sid)}"'))
        assert seqs == list(range(1, 4 * 3 * 15 + extra + 1))
        events = sorted(r[0] for r in execute(backend, f'SELECT seq FROM "{events_table(sid)}"'))
        # session_created; per unit its tick and node_created (the tick names no node)
        assert events == list(range(1, 1 + 4 * 3 * 15 * 2 + extra + 1))
