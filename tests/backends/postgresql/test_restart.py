"""A server restart in the middle of a write loop: nothing acknowledged is lost, nothing doubled."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from soong_store import SessionStore
from tests import postgres_server
from tests.conftest import text

pytestmark = [pytest.mark.asyncio, pytest.mark.reliability, pytest.mark.postgresql]


async def test_a_restart_mid_write_loop_loses_no_acknowledged_unit(
    own_server: postgres_server.PostgresServer, tmp_path: Path
) -> None:
    with postgres_server.fresh_database(own_server.url) as url:
        async with SessionStore(home=tmp_path / "home", url=url, lock_wait=60) as store:
            sid = (await store.create_session(cwd=".")).session_id
            acknowledged: list[str] = []
            failures: list[BaseException] = []
            restarted = threading.Event()

            async def loop(lane: int) -> None:
                i = 0
                while not restarted.is_set() or i < 40:
                    try:
                        async with store.transaction(sid) as tx:
                            node = tx.add_node(
                                "user", "message", text(f"{lane}.{i}"), parent_id=None
                            )
                            tx.add_event("tick", payload={"lane": lane, "i": i})
                    except Exception as exc:
                        failures.append(exc)
                    else:
                        acknowledged.append(node)
                    i += 1

            def restart() -> None:
                own_server.restart()
                restarted.set()

            writers = [asyncio.create_task(loop(lane)) for lane in range(3)]
            await asyncio.sleep(0.5)
            before = len(acknowledged)
            await asyncio.to_thread(restart)
            await asyncio.gather(*writers)

            assert failures == []
            assert before > 0 and len(acknowledged) > before
            nodes = await store.list_nodes(sid)
            assert sorted(n.node_id for n in nodes) == sorted(acknowledged)
            assert [n.node_seq for n in nodes] == list(range(1, len(nodes) + 1))
            seqs = [e.seq for e in await store.timeline(sid)]
            assert seqs == list(range(1, 1 + 2 * len(nodes) + 1))
            after = await store.append_node(sid, "user", "message", text("after"), parent_id=None)
            assert after.node_seq == len(nodes) + 1


@pytest.mark.slow
async def test_crashes_mid_write_loop_resolve_every_commit_they_cut(
    own_server: postgres_server.PostgresServer, tmp_path: Path
) -> None:
    """Immediate stops (a crash: no shutdown checkpoint) while eight sessions are written.

    A COMMIT cut by a crash is resolved by asking the recovered server; a transaction the crash
    kept out of its log is one it calls "in the future", and runs again. ``durability="full"``
    because the test server does not wait for its log at ``COMMIT`` (it would lose acknowledged
    units by design).
    """
    with postgres_server.fresh_database(own_server.url) as url:
        async with SessionStore(
            home=tmp_path / "home", url=url, lock_wait=60, durability="full"
        ) as store:
            sids = [(await store.create_session(cwd=".")).session_id for _ in range(8)]
            for sid in sids:  # their tables made before the first crash
                await store.append_node(sid, "user", "message", text("first"), parent_id=None)
            acknowledged: dict[str, list[str]] = {sid: [] for sid in sids}
            failures: list[BaseException] = []
            crashed = threading.Event()

            async def loop(sid: str) -> None:
                i = 0
                while not crashed.is_set():
                    try:
                        node = await store.append_node(
                            sid, "user", "message", text(str(i)), parent_id=None
                        )
                    except Exception as exc:
                        failures.append(exc)
                    else:
                        acknowledged[sid].append(node.node_id)
                    i += 1

            def crash(times: int) -> None:
                for _ in range(times):
                    time.sleep(0.6)
                    own_server.crash_and_start()
                crashed.set()

            writers = [asyncio.create_task(loop(sid)) for sid in sids]
            await asyncio.to_thread(crash, 30)
            await asyncio.gather(*writers)

            assert failures == []
            for sid in sids:
                nodes = await store.list_nodes(sid)
                assert [n.node_id for n in nodes[1:]] == acknowledged[sid]
                assert [n.node_seq for n in nodes] == list(range(1, len(nodes) + 1))
