"""A server restart in the middle of a write loop: nothing acknowledged is lost, nothing doubled."""

from __future__ import annotations

import asyncio
import threading
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
